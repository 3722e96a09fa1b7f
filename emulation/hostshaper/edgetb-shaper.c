/*
 * edgetb-shaper: the host shaper's per-packet path. Delays and drops the packets of a
 * testbed's links as netem would, where the kernel has no sch_netem.
 *
 * The testbed's switch namespace queues every IPv4 packet the bridge forwards on a
 * shaped link to the NFQUEUE numbered after its destination host (rules in its raw
 * PREROUTING chain, made by emulation/hostshaper/__init__.py; bridged packets reach
 * iptables through br_netfilter there). This process binds each host's queue (in the
 * namespace given with the host: setns, socket, back), finds each packet's link (source
 * address -> source host, queue -> destination host) and, per link, drops it with the
 * link's loss probability or holds it until its release time:
 *
 *   release = max(now + delay + jitter, last release of the link) [+ serialisation at
 *             rate, after the previous packet, as netem's rate does]
 *
 * Jitter is drawn as netem draws it (tabledist: uniform, or iproute2's .dist tables of
 * normal, pareto, paretonormal). A link keeps FIFO order (no reordering); a link holds
 * at most LINK_LIMIT packets (more are dropped, as netem's limit does).
 *
 * Why in the switch, between the hosts: there a packet has left its sender's socket (a
 * delay queue below a TCP socket throttles it: TCP small queues allow ~2 packets below a
 * slow socket; netem orphans what it holds for that reason), a drop is silent, as on a
 * wire, and the receiver's kernel stamps the packet's arrival after the hold (the
 * veth crossing clears the stamp), so ping, captures and SO_TIMESTAMP applications see
 * both delays of a round trip. Held at the receiver's ingress instead, a packet keeps
 * the stamp of its arrival before the hold and such tools see one delay less.

 * Control: a Unix stream socket; one line in, one line out:
 *   ping                  -> pong PID
 *   begin                 -> ok        (staging: every link unshaped)
 *   link SRC DST DELAY_NS JITTER_NS DIST LOSS_THRESHOLD RATE_BPS
 *                         -> ok | error ...   (DIST: uniform|normal|pareto|paretonormal;
 *                            LOSS_THRESHOLD: drop when a 32-bit random number is below
 *                            it, 0..4294967296)
 *   commit                -> ok | error ... (the staged links replace the live ones;
 *                            packets already held keep their release times)
 *   stats                 -> one line of JSON (counters, lateness percentiles)
 *   resetlate             -> ok        (the lateness histogram starts again)
 *
 * Usage: edgetb-shaper --control PATH [--dist-dir DIR] [--seed N] [--rt-priority N]
 *                      [--tag=edgetb.run=RUN:shaper] HOST=ADDR=NETNS_PATH[=QUEUE] ...
 * Prints "ready PID" on stdout once every queue is bound and the control socket listens.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <libmnl/libmnl.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nfnetlink_queue.h>
#include <libnetfilter_queue/libnetfilter_queue.h>

#define MAX_HOSTS 32
#define LINK_LIMIT 10000 /* packets held per link, as the netem limit the tcconfig shapers set */
#define RING 16384       /* > LINK_LIMIT, a power of two */
#define QUEUE_MAXLEN 65536
#define COPY_RANGE 64 /* the IPv4 header is all that is read */
#define ETH_HLEN_ 14  /* netem's rate counts the frame; the queue sees the IP packet */
#define NETEM_DIST_SCALE 8192
#define DIST_MAX 65536
#define LATE_BUCKETS 20000 /* 1 us each; later ones go to the last */
#define MAX_CLIENTS 8
#define CLIENT_BUF 65536
#define CLIENT_OUT 262144                  /* replies not read yet; a stats reply fits */
#define CLIENT_IDLE_NS 10000000000ull     /* a connection silent this long is closed */
#define RATE_MIN_BPS 1000ull              /* 0 is no limit */
#define RATE_MAX_BPS 1000000000000ull     /* 1 Tbit/s */

enum { D_UNIFORM, D_NORMAL, D_PARETO, D_PARETONORMAL, D_COUNT };
static const char *DIST_NAMES[D_COUNT] = {"uniform", "normal", "pareto", "paretonormal"};

struct held {
	uint32_t id;
	uint64_t release_ns;
};

struct params {
	uint64_t delay_ns, jitter_ns, rate_bps, loss_threshold;
	int dist;
};

struct link {
	struct params p;
	struct held *ring;
	uint32_t head, count;
	uint64_t last_release_ns;
	uint64_t packets, dropped, overflow, bytes, passed;
};

struct host {
	char name[32];
	uint32_t addr; /* network order */
	struct mnl_socket *nl;
	int fd;
	uint32_t portid;
	uint16_t queue; /* its NFQUEUE number (in the namespace it was bound in) */
	char out[16384]; /* verdicts waiting to be sent */
	size_t out_len;
};

/* A control client. The delayer has one thread, which also releases every held packet:
 * nothing a client does may block it. Replies are queued and sent as the socket takes
 * them; while some wait, the client's further lines wait too; a client whose replies do
 * not fit (it never reads), or that stays silent, is closed. */
struct client {
	int fd;
	char buf[CLIENT_BUF];
	size_t len;
	char out[CLIENT_OUT];
	size_t out_len, out_off;
	uint64_t last_ns;
};

static struct host hosts[MAX_HOSTS];
static int n_hosts;
static struct link *links; /* [src * n_hosts + dst] */
static struct params *staged;
static int staged_ok;
static int16_t *dist_table[D_COUNT];
static int dist_size[D_COUNT];
static uint64_t late_hist[LATE_BUCKETS];
static uint64_t late_count, late_max_ns, released, unknown_source, stamped;
static uint64_t spun_ns; /* time spent waiting out the last stretch before releases */
static uint64_t rng_s[4];
static struct client clients[MAX_CLIENTS];
static int timer_fd, listen_fd, epoll_fd;

static void die(const char *what)
{
	fprintf(stderr, "edgetb-shaper: %s: %s\n", what, strerror(errno));
	exit(1);
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* xoshiro256**: fast, and seedable for a reproducible run */
static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
static uint64_t rng_next(void)
{
	uint64_t r = rotl(rng_s[1] * 5, 7) * 9, t = rng_s[1] << 17;
	rng_s[2] ^= rng_s[0];
	rng_s[3] ^= rng_s[1];
	rng_s[1] ^= rng_s[2];
	rng_s[0] ^= rng_s[3];
	rng_s[2] ^= t;
	rng_s[3] = rotl(rng_s[3], 45);
	return r;
}
static void rng_seed(uint64_t seed)
{
	for (int i = 0; i < 4; i++) { /* splitmix64 */
		uint64_t z = (seed += 0x9e3779b97f4a7c15ull);
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
		z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
		rng_s[i] = z ^ (z >> 31);
	}
}

/* iproute2's distribution file: shorts, '#' comments (as tc's get_distribution reads it) */
static void load_dist(const char *dir, int d)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/%s.dist", dir, DIST_NAMES[d]);
	FILE *f = fopen(path, "r");
	if (!f)
		return;
	int16_t *t = malloc(sizeof(int16_t) * DIST_MAX);
	int n = 0;
	char line[4096];
	while (fgets(line, sizeof line, f) && n < DIST_MAX) {
		if (line[0] == '#')
			continue;
		char *p = line, *end;
		for (;;) {
			long v = strtol(p, &end, 10);
			if (end == p || n >= DIST_MAX)
				break;
			t[n++] = (int16_t)v;
			p = end;
		}
	}
	fclose(f);
	if (n > 0) {
		dist_table[d] = t;
		dist_size[d] = n;
	} else {
		free(t);
	}
}

/* netem's tabledist() in ns, 64-bit: mu + sigma * table[rnd] / NETEM_DIST_SCALE */
static int64_t jittered(const struct params *p)
{
	int64_t mu = (int64_t)p->delay_ns, sigma = (int64_t)p->jitter_ns;
	if (sigma == 0)
		return mu;
	uint64_t rnd = rng_next();
	if (p->dist == D_UNIFORM)
		return (int64_t)(rnd % (2 * (uint64_t)sigma)) + mu - sigma;
	int64_t t = dist_table[p->dist][(rnd >> 32) % (uint64_t)dist_size[p->dist]];
	int64_t x = (sigma % NETEM_DIST_SCALE) * t;
	x += x >= 0 ? NETEM_DIST_SCALE / 2 : -NETEM_DIST_SCALE / 2;
	return x / NETEM_DIST_SCALE + (sigma / NETEM_DIST_SCALE) * t + mu;
}

static void queue_verdict(struct host *h, uint32_t id, int verdict)
{
	if (h->out_len + MNL_NLMSG_HDRLEN + 64 > sizeof h->out) {
		if (mnl_socket_sendto(h->nl, h->out, h->out_len) < 0)
			fprintf(stderr, "edgetb-shaper: verdicts to %s: %s\n", h->name, strerror(errno));
		h->out_len = 0;
	}
	struct nlmsghdr *nlh = nfq_nlmsg_put(h->out + h->out_len, NFQNL_MSG_VERDICT, h->queue);
	nfq_nlmsg_verdict_put(nlh, (int)id, verdict);
	h->out_len += NLMSG_ALIGN(nlh->nlmsg_len);
}

static void flush_verdicts(void)
{
	for (int i = 0; i < n_hosts; i++) {
		struct host *h = &hosts[i];
		if (h->out_len && mnl_socket_sendto(h->nl, h->out, h->out_len) < 0)
			fprintf(stderr, "edgetb-shaper: verdicts to %s: %s\n", h->name, strerror(errno));
		h->out_len = 0;
	}
}

static void record_late(uint64_t late_ns)
{
	uint64_t us = late_ns / 1000;
	late_hist[us < LATE_BUCKETS ? us : LATE_BUCKETS - 1]++;
	late_count++;
	if (late_ns > late_max_ns)
		late_max_ns = late_ns;
}

static int src_index(uint32_t addr)
{
	for (int i = 0; i < n_hosts; i++)
		if (hosts[i].addr == addr)
			return i;
	return -1;
}

static uint64_t recv_now, real_minus_mono;

/* When the packet reached the host's stack (its skb timestamp, CLOCK_REALTIME in us, as
 * a monotonic time), else when this process read it. Taking the delay from the arrival
 * keeps this process's wake-up (tens of us on an idle vCPU) out of the link's delay. */
static uint64_t arrival_ns(struct nlattr *ts_attr)
{
	if (!ts_attr)
		return recv_now;
	stamped++;
	struct nfqnl_msg_packet_timestamp *ts = mnl_attr_get_payload(ts_attr);
	uint64_t real = be64toh(ts->sec) * 1000000000ull + be64toh(ts->usec) * 1000ull;
	uint64_t t = real - real_minus_mono;
	if (t > recv_now || recv_now - t > 10000000ull) /* a clock step: trust our own */
		return recv_now;
	return t;
}

static int on_packet(const struct nlmsghdr *nlh, void *data)
{
	int dst = (int)(intptr_t)data;
	struct host *h = &hosts[dst];
	struct nlattr *attr[NFQA_MAX + 1] = {0};
	if (nfq_nlmsg_parse(nlh, attr) < 0 || !attr[NFQA_PACKET_HDR])
		return MNL_CB_OK;
	struct nfqnl_msg_packet_hdr *ph = mnl_attr_get_payload(attr[NFQA_PACKET_HDR]);
	uint32_t id = ntohl(ph->packet_id);
	uint32_t len = 0, addr = 0;
	if (attr[NFQA_PAYLOAD]) {
		const uint8_t *pkt = mnl_attr_get_payload(attr[NFQA_PAYLOAD]);
		len = mnl_attr_get_payload_len(attr[NFQA_PAYLOAD]);
		if (len >= 20 && (pkt[0] >> 4) == 4)
			memcpy(&addr, pkt + 12, 4);
	}
	if (attr[NFQA_CAP_LEN])
		len = ntohl(mnl_attr_get_u32(attr[NFQA_CAP_LEN]));
	int src = src_index(addr);
	if (src < 0 || src == dst) {
		unknown_source++;
		queue_verdict(h, id, NF_ACCEPT);
		return MNL_CB_OK;
	}
	struct link *l = &links[src * n_hosts + dst];
	const struct params *p = &l->p;
	l->packets++;
	l->bytes += len;
	if (p->loss_threshold && (rng_next() >> 32) < p->loss_threshold) {
		l->dropped++;
		queue_verdict(h, id, NF_DROP);
		return MNL_CB_OK;
	}
	if (!p->delay_ns && !p->jitter_ns && !p->rate_bps && !l->count) {
		l->passed++;
		queue_verdict(h, id, NF_ACCEPT);
		return MNL_CB_OK;
	}
	if (l->count >= LINK_LIMIT) {
		l->overflow++;
		queue_verdict(h, id, NF_DROP);
		return MNL_CB_OK;
	}
	int64_t d = jittered(p);
	uint64_t arrived = arrival_ns(attr[NFQA_TIMESTAMP]);
	uint64_t release = d > 0 ? arrived + (uint64_t)d : arrived;
	if (l->count && release < l->last_release_ns)
		release = l->last_release_ns; /* FIFO: never before the packet ahead */
	if (p->rate_bps)
		release += (uint64_t)(len + ETH_HLEN_) * 8ull * 1000000000ull / p->rate_bps;
	l->last_release_ns = release;
	l->ring[(l->head + l->count) & (RING - 1)] = (struct held){id, release};
	l->count++;
	return MNL_CB_OK;
}

static void receive(int dst)
{
	static char buf[262144];
	struct host *h = &hosts[dst];
	for (;;) {
		ssize_t n = mnl_socket_recvfrom(h->nl, buf, sizeof buf);
		if (n < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return;
			if (errno == ENOBUFS) { /* the kernel dropped queue messages: counted, go on */
				fprintf(stderr, "edgetb-shaper: %s: receive buffer overrun\n", h->name);
				continue;
			}
			die("recv");
		}
		struct timespec real;
		recv_now = now_ns();
		clock_gettime(CLOCK_REALTIME, &real);
		real_minus_mono = (uint64_t)real.tv_sec * 1000000000ull + (uint64_t)real.tv_nsec - recv_now;
		mnl_cb_run(buf, (size_t)n, 0, h->portid, on_packet, (void *)(intptr_t)dst);
	}
}

/* The timer is armed this much before a release and the last stretch is waited out on
 * the clock: a timer's wake-up is late by tens of microseconds (measured: p50 28 us here),
 * a spin of that length is not. The advance follows the wake-ups' own lateness. */
#define ADVANCE_MAX_NS 200000
static uint64_t advance_ns = 30000, timer_target_ns;

/* Release every held packet that is due; arm the timer for the next one. */
static void release_due(int all)
{
	uint64_t now = now_ns(), next;
	if (timer_target_ns && now >= timer_target_ns) { /* woken by the timer (or later) */
		uint64_t woke_late = now - timer_target_ns;
		/* EWMA of how late a wake-up is, 1/16 per sample, kept below ADVANCE_MAX_NS */
		advance_ns = advance_ns - advance_ns / 16 + woke_late / 16;
		if (advance_ns > ADVANCE_MAX_NS)
			advance_ns = ADVANCE_MAX_NS;
		timer_target_ns = 0;
	}
	for (;;) {
		next = UINT64_MAX;
		for (int i = 0; i < n_hosts * n_hosts; i++) {
			struct link *l = &links[i];
			while (l->count) {
				struct held *e = &l->ring[l->head];
				if (!all && e->release_ns > now) {
					if (e->release_ns < next)
						next = e->release_ns;
					break;
				}
				queue_verdict(&hosts[i % n_hosts], e->id, NF_ACCEPT);
				if (!all)
					record_late(now - e->release_ns);
				released++;
				l->head = (l->head + 1) & (RING - 1);
				l->count--;
			}
		}
		if (next == UINT64_MAX || next > now + advance_ns)
			break;
		flush_verdicts(); /* what is due goes now; then the short wait for the next */
		uint64_t spin_from = now_ns();
		while ((now = now_ns()) < next)
			;
		spun_ns += now - spin_from;
	}
	flush_verdicts();
	struct itimerspec its = {0};
	if (next != UINT64_MAX) {
		timer_target_ns = next - advance_ns;
		its.it_value.tv_sec = (time_t)(timer_target_ns / 1000000000ull);
		its.it_value.tv_nsec = (long)(timer_target_ns % 1000000000ull);
	} else {
		timer_target_ns = 0;
	}
	timerfd_settime(timer_fd, TFD_TIMER_ABSTIME, &its, NULL);
}

static void bind_queue(int i, const char *netns_path, uint16_t queue)
{
	struct host *h = &hosts[i];
	h->queue = queue;
	int self = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
	int target = open(netns_path, O_RDONLY | O_CLOEXEC);
	if (self < 0 || target < 0)
		die(netns_path);
	if (setns(target, CLONE_NEWNET) < 0)
		die("setns");
	h->nl = mnl_socket_open(NETLINK_NETFILTER);
	if (!h->nl || mnl_socket_bind(h->nl, 0, MNL_SOCKET_AUTOPID) < 0)
		die("netlink socket");
	if (setns(self, CLONE_NEWNET) < 0)
		die("setns back");
	close(self);
	close(target);
	h->portid = mnl_socket_get_portid(h->nl);
	h->fd = mnl_socket_get_fd(h->nl);
	int rcvbuf = 16 << 20, one = 1;
	if (setsockopt(h->fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof rcvbuf) < 0)
		setsockopt(h->fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
	setsockopt(h->fd, SOL_NETLINK, NETLINK_NO_ENOBUFS, &one, sizeof one);
	fcntl(h->fd, F_SETFL, fcntl(h->fd, F_GETFL) | O_NONBLOCK);

	char buf[MNL_SOCKET_BUFFER_SIZE];
	struct nlmsghdr *nlh = nfq_nlmsg_put(buf, NFQNL_MSG_CONFIG, queue);
	nfq_nlmsg_cfg_put_cmd(nlh, AF_INET, NFQNL_CFG_CMD_BIND);
	if (mnl_socket_sendto(h->nl, nlh, nlh->nlmsg_len) < 0)
		die("bind queue");
	nlh = nfq_nlmsg_put(buf, NFQNL_MSG_CONFIG, queue);
	nfq_nlmsg_cfg_put_params(nlh, NFQNL_COPY_PACKET, COPY_RANGE);
	nfq_nlmsg_cfg_put_qmaxlen(nlh, QUEUE_MAXLEN);
	if (mnl_socket_sendto(h->nl, nlh, nlh->nlmsg_len) < 0)
		die("configure queue");
	struct epoll_event ev = {.events = EPOLLIN, .data.u64 = (uint64_t)i};
	if (epoll_ctl(epoll_fd, EPOLL_CTL_ADD, h->fd, &ev) < 0)
		die("epoll");
}

static int host_index(const char *name)
{
	for (int i = 0; i < n_hosts; i++)
		if (!strcmp(hosts[i].name, name))
			return i;
	return -1;
}

static void stats_json(char *out, size_t size)
{
	size_t n = 0;
	uint64_t pct[3] = {0, 0, 0};
	const double q[3] = {0.5, 0.99, 0.999};
	for (int k = 0; k < 3 && late_count; k++) {
		uint64_t want = (uint64_t)(q[k] * (double)late_count), seen = 0;
		for (int b = 0; b < LATE_BUCKETS; b++) {
			seen += late_hist[b];
			if (seen > want) {
				pct[k] = (uint64_t)b;
				break;
			}
		}
	}
	n += (size_t)snprintf(out + n, size - n,
		"{\"pid\": %d, \"advance_us\": %" PRIu64 ", \"spun_us\": %" PRIu64 ", \"released\": %" PRIu64 ", \"unknown_source\": %" PRIu64 ", \"stamped\": %" PRIu64
		", \"late_us\": {\"count\": %" PRIu64 ", \"p50\": %" PRIu64 ", \"p99\": %" PRIu64
		", \"p999\": %" PRIu64 ", \"max\": %" PRIu64 "}, \"links\": [",
		getpid(), advance_ns / 1000, spun_ns / 1000, released, unknown_source, stamped, late_count, pct[0], pct[1], pct[2], late_max_ns / 1000);
	int first = 1;
	for (int s = 0; s < n_hosts; s++)
		for (int d = 0; d < n_hosts; d++) {
			struct link *l = &links[s * n_hosts + d];
			if (s == d || n + 512 > size)
				continue;
			n += (size_t)snprintf(out + n, size - n,
				"%s{\"src\": \"%s\", \"dst\": \"%s\", \"delay_ns\": %" PRIu64
				", \"jitter_ns\": %" PRIu64 ", \"dist\": \"%s\", \"loss_threshold\": %" PRIu64
				", \"rate_bps\": %" PRIu64 ", \"packets\": %" PRIu64 ", \"dropped\": %" PRIu64
				", \"overflow\": %" PRIu64 ", \"bytes\": %" PRIu64 ", \"held\": %u}",
				first ? "" : ", ", hosts[s].name, hosts[d].name, l->p.delay_ns, l->p.jitter_ns,
				DIST_NAMES[l->p.dist], l->p.loss_threshold, l->p.rate_bps, l->packets,
				l->dropped, l->overflow, l->bytes, l->count);
			first = 0;
		}
	snprintf(out + n, size - n, "]}\n");
}

static void command(struct client *c, char *line)
{
	static char reply[131072];
	char src[64], dst[64], dist[32];
	uint64_t delay, jitter, loss, rate;
	const char *out = "ok\n";
	if (!strcmp(line, "ping")) {
		snprintf(reply, sizeof reply, "pong %d\n", getpid());
		out = reply;
	} else if (!strcmp(line, "begin")) {
		memset(staged, 0, sizeof(struct params) * (size_t)(n_hosts * n_hosts));
		staged_ok = 1;
	} else if (sscanf(line, "link %63s %63s %" SCNu64 " %" SCNu64 " %31s %" SCNu64 " %" SCNu64,
			  src, dst, &delay, &jitter, dist, &loss, &rate) == 7) {
		int s = host_index(src), d = host_index(dst), k = -1;
		for (int i = 0; i < D_COUNT; i++)
			if (!strcmp(dist, DIST_NAMES[i]))
				k = i;
		if (s < 0 || d < 0 || s == d) {
			snprintf(reply, sizeof reply, "error no link %s -> %s\n", src, dst);
		} else if (k < 0 || (k != D_UNIFORM && !dist_table[k])) {
			snprintf(reply, sizeof reply, "error distribution %s: no table\n", dist);
		} else if (loss > (1ull << 32) || delay > 3600ull * 1000000000ull || jitter > delay ||
			   (rate && (rate < RATE_MIN_BPS || rate > RATE_MAX_BPS))) {
			snprintf(reply, sizeof reply, "error link %s -> %s: values out of range\n", src, dst);
		} else {
			staged[s * n_hosts + d] = (struct params){delay, jitter, rate, loss, k};
			reply[0] = 0;
		}
		if (reply[0]) {
			staged_ok = 0;
			out = reply;
		}
	} else if (!strcmp(line, "commit")) {
		if (!staged_ok) {
			out = "error nothing valid staged (begin, then link lines)\n";
		} else {
			for (int i = 0; i < n_hosts * n_hosts; i++)
				links[i].p = staged[i];
			staged_ok = 0;
		}
	} else if (!strcmp(line, "stats")) {
		stats_json(reply, sizeof reply);
		out = reply;
	} else if (!strcmp(line, "resetlate")) {
		memset(late_hist, 0, sizeof late_hist);
		late_count = late_max_ns = spun_ns = 0;
	} else {
		snprintf(reply, sizeof reply, "error unknown command: %.80s\n", line);
		out = reply;
	}
	size_t len = strlen(out);
	if (c->out_len + len > sizeof c->out) { /* it does not read its replies */
		c->out_len = SIZE_MAX;
	} else {
		memcpy(c->out + c->out_len, out, len);
		c->out_len += len;
	}
	reply[0] = 0;
}

static void client_close(struct client *c)
{
	epoll_ctl(epoll_fd, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	c->fd = -1;
	c->len = c->out_len = c->out_off = 0;
}

/* Send what the socket takes of the queued replies (never waits). 1: all sent; 0: some
 * wait (the client is then watched for room, not for input); -1: closed. */
static int client_flush(struct client *c, uint64_t tag)
{
	if (c->out_len == SIZE_MAX) {
		client_close(c);
		return -1;
	}
	while (c->out_off < c->out_len) {
		ssize_t w = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
		if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			struct epoll_event ev = {.events = EPOLLOUT, .data.u64 = tag};
			epoll_ctl(epoll_fd, EPOLL_CTL_MOD, c->fd, &ev);
			return 0;
		}
		if (w <= 0) {
			client_close(c);
			return -1;
		}
		c->out_off += (size_t)w;
	}
	c->out_len = c->out_off = 0;
	struct epoll_event ev = {.events = EPOLLIN, .data.u64 = tag};
	epoll_ctl(epoll_fd, EPOLL_CTL_MOD, c->fd, &ev);
	return 1;
}

/* Answer the complete lines buffered, as long as the replies are taken. */
static void client_lines(struct client *c, uint64_t tag)
{
	char *start = c->buf, *nl;
	c->buf[c->len] = 0;
	while ((nl = strchr(start, '\n'))) {
		*nl = 0;
		command(c, start);
		start = nl + 1;
		if (client_flush(c, tag) <= 0)
			break;
	}
	if (c->fd < 0)
		return;
	c->len -= (size_t)(start - c->buf);
	memmove(c->buf, start, c->len);
}

static void client_event(struct client *c, uint64_t tag, uint32_t events)
{
	c->last_ns = now_ns();
	if (c->out_len) { /* replies wait: send them first, then the lines behind them */
		if (client_flush(c, tag) > 0)
			client_lines(c, tag);
		return;
	}
	if (!(events & (EPOLLIN | EPOLLHUP | EPOLLERR)))
		return;
	ssize_t n = read(c->fd, c->buf + c->len, sizeof c->buf - 1 - c->len);
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		return;
	if (n <= 0) {
		client_close(c);
		return;
	}
	c->len += (size_t)n;
	client_lines(c, tag);
	if (c->fd >= 0 && c->len >= sizeof c->buf - 1) /* a line longer than the buffer */
		client_close(c);
}

/* Close the connections silent for CLIENT_IDLE_NS; whether any is left open. */
static int clients_expire(void)
{
	int open_ = 0;
	uint64_t now = now_ns();
	for (int i = 0; i < MAX_CLIENTS; i++) {
		if (clients[i].fd < 0)
			continue;
		if (now - clients[i].last_ns > CLIENT_IDLE_NS)
			client_close(&clients[i]);
		else
			open_ = 1;
	}
	return open_;
}

#define EV_TIMER (1ull << 40)
#define EV_LISTEN (2ull << 40)
#define EV_SIGNAL (3ull << 40)
#define EV_CLIENT (4ull << 40)

int main(int argc, char **argv)
{
	const char *control = NULL, *dist_dir = "/usr/lib/x86_64-linux-gnu/tc";
	uint64_t seed = 0;
	int have_seed = 0, rt_priority = 0;
	char *netns[MAX_HOSTS];
	uint16_t queue[MAX_HOSTS];
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--control") && i + 1 < argc)
			control = argv[++i];
		else if (!strcmp(argv[i], "--dist-dir") && i + 1 < argc)
			dist_dir = argv[++i];
		else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
			seed = strtoull(argv[++i], NULL, 10), have_seed = 1;
		else if (!strcmp(argv[i], "--rt-priority") && i + 1 < argc)
			rt_priority = atoi(argv[++i]);
		else if (!strncmp(argv[i], "--tag=", 6))
			continue; /* names the run's process for `testbed clean` */
		else {
			char *a = strdup(argv[i]), *addr = strchr(a, '='), *path, *num, *end = NULL;
			if (!addr || !(path = strchr(addr + 1, '=')) || n_hosts == MAX_HOSTS) {
				fprintf(stderr, "edgetb-shaper: bad argument %s (HOST=ADDR=NETNS_PATH[=QUEUE])\n", argv[i]);
				return 2;
			}
			*addr++ = 0;
			*path++ = 0;
			unsigned long q = 0;
			if ((num = strchr(path, '='))) {
				*num++ = 0;
				q = strtoul(num, &end, 10);
				if (!*num || *end || q > 65535) {
					fprintf(stderr, "edgetb-shaper: bad queue number in %s\n", argv[i]);
					return 2;
				}
			}
			queue[n_hosts] = (uint16_t)q;
			struct in_addr in;
			if (strlen(a) >= sizeof hosts[0].name || inet_pton(AF_INET, addr, &in) != 1) {
				fprintf(stderr, "edgetb-shaper: bad host %s\n", argv[i]);
				return 2;
			}
			snprintf(hosts[n_hosts].name, sizeof hosts[0].name, "%s", a);
			hosts[n_hosts].addr = in.s_addr;
			netns[n_hosts++] = path;
		}
	}
	if (!control || n_hosts < 2) {
		fprintf(stderr, "usage: edgetb-shaper --control PATH HOST=ADDR=NETNS_PATH[=QUEUE] ...\n");
		return 2;
	}
	if (!have_seed && getrandom(&seed, sizeof seed, 0) != sizeof seed)
		die("getrandom");
	rng_seed(seed);
	for (int d = D_NORMAL; d < D_COUNT; d++)
		load_dist(dist_dir, d);
	links = calloc((size_t)(n_hosts * n_hosts), sizeof *links);
	staged = calloc((size_t)(n_hosts * n_hosts), sizeof *staged);
	for (int i = 0; i < n_hosts * n_hosts; i++)
		links[i].ring = (i / n_hosts == i % n_hosts) ? NULL : malloc(sizeof(struct held) * RING);

	/* A timer's expiry lands on time only with a slack of 1 ns (the default is 50 us);
	 * real-time priority keeps the JVMs from delaying a release. */
	prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
	if (rt_priority > 0) {
		struct sched_param sp = {.sched_priority = rt_priority};
		if (sched_setscheduler(0, SCHED_FIFO, &sp) < 0)
			fprintf(stderr, "edgetb-shaper: no real-time priority (%s): releases may be later\n",
				strerror(errno));
	}

	epoll_fd = epoll_create1(EPOLL_CLOEXEC);
	timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	sigset_t mask;
	sigemptyset(&mask);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGHUP);
	sigprocmask(SIG_BLOCK, &mask, NULL);
	signal(SIGPIPE, SIG_IGN);
	int sig_fd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
	if (epoll_fd < 0 || timer_fd < 0 || sig_fd < 0)
		die("epoll/timerfd/signalfd");
	struct epoll_event ev = {.events = EPOLLIN, .data.u64 = EV_TIMER};
	epoll_ctl(epoll_fd, EPOLL_CTL_ADD, timer_fd, &ev);
	ev.data.u64 = EV_SIGNAL;
	epoll_ctl(epoll_fd, EPOLL_CTL_ADD, sig_fd, &ev);

	for (int i = 0; i < n_hosts; i++)
		bind_queue(i, netns[i], queue[i]);
	/* Receive timestamps are taken only while some socket asks for them: this one does
	 * (it is never read), so the queue reports each packet's arrival. */
	int stamp_fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0), on = 1;
	if (stamp_fd < 0 || setsockopt(stamp_fd, SOL_SOCKET, SO_TIMESTAMPNS, &on, sizeof on) < 0)
		fprintf(stderr, "edgetb-shaper: no receive timestamps (%s): delays start when read\n",
			strerror(errno));

	struct sockaddr_un sun = {.sun_family = AF_UNIX};
	if (strlen(control) >= sizeof sun.sun_path) {
		fprintf(stderr, "edgetb-shaper: control path too long: %s\n", control);
		return 2;
	}
	strcpy(sun.sun_path, control);
	unlink(control);
	listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	mode_t old = umask(077);
	if (listen_fd < 0 || bind(listen_fd, (struct sockaddr *)&sun, sizeof sun) < 0 ||
	    listen(listen_fd, 16) < 0)
		die(control);
	umask(old);
	ev.data.u64 = EV_LISTEN;
	epoll_ctl(epoll_fd, EPOLL_CTL_ADD, listen_fd, &ev);
	for (int i = 0; i < MAX_CLIENTS; i++)
		clients[i].fd = -1;

	printf("ready %d\n", getpid());
	fflush(stdout);

	struct epoll_event events[32];
	int watching = 0; /* clients are connected: wake each second to expire silent ones */
	for (;;) {
		int n = epoll_wait(epoll_fd, events, 32, watching ? 1000 : -1);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			die("epoll_wait");
		}
		for (int k = 0; k < n; k++) {
			uint64_t tag = events[k].data.u64;
			if (tag < (uint64_t)n_hosts) {
				receive((int)tag);
			} else if (tag == EV_TIMER) {
				uint64_t expirations;
				if (read(timer_fd, &expirations, sizeof expirations) < 0 && errno != EAGAIN)
					die("timerfd");
			} else if (tag == EV_SIGNAL) {
				release_due(1); /* let what is held go, then end */
				unlink(control);
				return 0;
			} else if (tag == EV_LISTEN) {
				int fd;
				while ((fd = accept4(listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
					int slot = -1;
					for (int i = 0; i < MAX_CLIENTS; i++)
						if (clients[i].fd < 0)
							slot = i;
					if (slot < 0) {
						close(fd);
						continue;
					}
					clients[slot].fd = fd;
					clients[slot].len = clients[slot].out_len = clients[slot].out_off = 0;
					clients[slot].last_ns = now_ns();
					struct epoll_event cev = {.events = EPOLLIN,
								  .data.u64 = EV_CLIENT + (uint64_t)slot};
					epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &cev);
				}
			} else if (tag >= EV_CLIENT && tag < EV_CLIENT + MAX_CLIENTS) {
				client_event(&clients[tag - EV_CLIENT], tag, events[k].events);
			}
		}
		watching = clients_expire();
		release_due(0);
	}
}
