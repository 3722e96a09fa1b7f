package edgetb.ycsb;

import com.datastax.oss.driver.api.core.ConsistencyLevel;
import com.datastax.oss.driver.api.core.CqlSession;
import com.datastax.oss.driver.api.core.CqlSessionBuilder;
import com.datastax.oss.driver.api.core.DefaultConsistencyLevel;
import com.datastax.oss.driver.api.core.config.DefaultDriverOption;
import com.datastax.oss.driver.api.core.config.DriverConfigLoader;
import com.datastax.oss.driver.api.core.cql.BoundStatement;
import com.datastax.oss.driver.api.core.cql.ColumnDefinition;
import com.datastax.oss.driver.api.core.cql.PreparedStatement;
import com.datastax.oss.driver.api.core.cql.ResultSet;
import com.datastax.oss.driver.api.core.cql.Row;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.File;
import java.net.InetSocketAddress;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.Vector;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.LongAdder;
import java.util.function.Supplier;
import site.ycsb.ByteIterator;
import site.ycsb.DB;
import site.ycsb.DBException;
import site.ycsb.Status;
import site.ycsb.StringByteIterator;

/**
 * YCSB's {@code DB} for Cassandra over CQL on the Apache Cassandra Java driver 4.
 *
 * <p>The table is YCSB's usual one: {@code y_id varchar PRIMARY KEY, field0 varchar, ...}
 * (the testbed creates it). Every operation is one prepared statement at the read or write
 * consistency level, never retried ({@link NoRetryPolicy}); coordinators are chosen
 * round-robin ({@link RoundRobinPolicy}) or token-aware (the driver's basic policy). One
 * session is shared by all of YCSB's client threads.
 *
 * <p>Properties: {@code hosts} (comma-separated addresses, required), {@code port} (9042),
 * {@code cassandra.keyspace} (ycsb), {@code cassandra.localdc} (datacenter1, the
 * SimpleSnitch's), {@code cassandra.readconsistencylevel} and {@code
 * cassandra.writeconsistencylevel} (ONE), {@code edgetb.policy} (round-robin or
 * token-aware), {@code edgetb.timeout_ms} (12000), {@code edgetb.credentials} (a JSON
 * file with username and password; default $EDGETB_CREDENTIALS, none: no login), {@code
 * edgetb.tls} (the directory of the run's client certificate, see Tls; default $EDGETB_TLS,
 * none: no TLS).
 *
 * <p>At the end two lines go to stderr: the errors by exception class, {@code
 * EDGETB-ERRORS {"READ WriteTimeoutException": 3, ...}}, and the window in which
 * operations ran, {@code EDGETB-WINDOW {"first_start_ns": ..., "last_end_ns": ...}}
 * (System.nanoTime): YCSB's own RunTime includes connecting the session, which at 100 ms
 * links is seconds of a short run, so throughput is taken over this window instead.
 */
public class CqlClient extends DB {
  static final String KEY = "y_id";

  private static final Object LOCK = new Object();
  private static CqlSession session;
  private static int users;
  private static final Map<String, PreparedStatement> PREPARED = new ConcurrentHashMap<>();
  private static final Map<String, LongAdder> ERRORS = new ConcurrentHashMap<>();
  private static final AtomicLong FIRST_START = new AtomicLong(Long.MAX_VALUE);
  private static final AtomicLong LAST_END = new AtomicLong(Long.MIN_VALUE);

  private ConsistencyLevel readCl;
  private ConsistencyLevel writeCl;

  @Override
  public void init() throws DBException {
    Properties p = getProperties();
    try {
      readCl = level(p.getProperty("cassandra.readconsistencylevel", "ONE"));
      writeCl = level(p.getProperty("cassandra.writeconsistencylevel", "ONE"));
    } catch (IllegalArgumentException e) {
      throw new DBException(e.getMessage());
    }
    synchronized (LOCK) {
      if (session == null) {
        startSession(p);
      }
      users++;
    }
  }

  /**
   * The shared session, its statements prepared. A failure closes it (the next thread
   * starts anew rather than using a session without them): YCSB drops a thread whose
   * init fails and lets the others run, so a slow node's first answers (a cold JVM in
   * an emulated guest took over the request timeout to prepare) get two more attempts.
   */
  private static void startSession(Properties p) throws DBException {
    for (int attempt = 1; ; attempt++) {
      try {
        session = connect(p);
        prepareAll(p);
        return;
      } catch (DBException e) {
        if (session != null) {
          session.close();
          session = null;
        }
        PREPARED.clear();
        if (attempt == 3) {
          throw e;
        }
        System.err.println("edgetb: attempt " + attempt + " to start the session failed: " + e);
      }
    }
  }

  /**
   * Every statement the workload can send, prepared before the first operation: preparing
   * one lazily costs round trips to every node inside the operation YCSB times (an update
   * of one random field has as many statements as the table has fields).
   */
  private static void prepareAll(Properties p) throws DBException {
    String table = p.getProperty("table", "usertable");
    String prefix = p.getProperty("fieldnameprefix", "field");
    int count = Integer.parseInt(p.getProperty("fieldcount", "10"));
    Map<String, ByteIterator> all = new HashMap<>(); // YCSB's own map: the same key order
    List<Set<String>> reads = new ArrayList<>();
    reads.add(null);
    for (int i = 0; i < count; i++) {
      String name = prefix + i;
      all.put(name, new StringByteIterator(""));
      reads.add(Set.of(name));
    }
    List<List<String>> writes = new ArrayList<>();
    writes.add(new ArrayList<>(all.keySet()));
    for (String name : all.keySet()) {
      writes.add(List.of(name));
    }
    try {
      for (Set<String> fields : reads) {
        prepared(readCql(table, fields));
        prepared(scanCql(table, fields));
      }
      for (List<String> names : writes) {
        prepared(updateCql(table, names));
      }
      prepared(insertCql(table, writes.get(0)));
      prepared(deleteCql(table));
    } catch (RuntimeException e) {
      throw new DBException("cannot prepare the workload's statements: " + e);
    }
  }

  static String readCql(String table, Set<String> fields) {
    return "SELECT " + columns(fields) + " FROM " + table + " WHERE " + KEY + " = ? LIMIT 1";
  }

  static String scanCql(String table, Set<String> fields) {
    return "SELECT " + columns(fields) + " FROM " + table + " WHERE token(" + KEY
        + ") >= token(?) LIMIT ?";
  }

  static String updateCql(String table, List<String> names) {
    StringBuilder set = new StringBuilder();
    for (String name : names) {
      set.append(set.length() == 0 ? "" : ", ").append(name).append(" = ?");
    }
    return "UPDATE " + table + " SET " + set + " WHERE " + KEY + " = ?";
  }

  static String insertCql(String table, List<String> names) {
    StringBuilder cols = new StringBuilder(KEY);
    StringBuilder marks = new StringBuilder("?");
    for (String name : names) {
      cols.append(", ").append(name);
      marks.append(", ?");
    }
    return "INSERT INTO " + table + " (" + cols + ") VALUES (" + marks + ")";
  }

  static String deleteCql(String table) {
    return "DELETE FROM " + table + " WHERE " + KEY + " = ?";
  }

  @Override
  public void cleanup() throws DBException {
    synchronized (LOCK) {
      if (--users > 0 || session == null) {
        return;
      }
      session.close();
      session = null;
      PREPARED.clear();
      Map<String, Long> counts = new TreeMap<>();
      ERRORS.forEach((k, v) -> counts.put(k, v.sum()));
      Map<String, Long> window = new TreeMap<>();
      if (LAST_END.get() > FIRST_START.get()) {
        window.put("first_start_ns", FIRST_START.get());
        window.put("last_end_ns", LAST_END.get());
      }
      ObjectMapper json = new ObjectMapper();
      try {
        System.err.println("EDGETB-ERRORS " + json.writeValueAsString(counts));
        System.err.println("EDGETB-WINDOW " + json.writeValueAsString(window));
      } catch (Exception e) {
        throw new DBException("cannot report: " + e);
      }
      ERRORS.clear();
      FIRST_START.set(Long.MAX_VALUE);
      LAST_END.set(Long.MIN_VALUE);
    }
  }

  /** One operation, its start and end folded into the window of all operations. */
  private static Status timed(Supplier<Status> op) {
    long start = System.nanoTime();
    try {
      return op.get();
    } finally {
      long end = System.nanoTime();
      FIRST_START.accumulateAndGet(start, Math::min);
      LAST_END.accumulateAndGet(end, Math::max);
    }
  }

  static ConsistencyLevel level(String name) {
    try {
      return DefaultConsistencyLevel.valueOf(name.trim().toUpperCase());
    } catch (IllegalArgumentException e) {
      throw new IllegalArgumentException("unknown consistency level " + name);
    }
  }

  private static CqlSession connect(Properties p) throws DBException {
    String hosts = p.getProperty("hosts");
    if (hosts == null || hosts.trim().isEmpty()) {
      throw new DBException("the property 'hosts' (Cassandra addresses) is required");
    }
    int port = Integer.parseInt(p.getProperty("port", "9042"));
    String policy = p.getProperty("edgetb.policy", "round-robin");
    String policyClass;
    if (policy.equals("round-robin")) {
      policyClass = RoundRobinPolicy.class.getName();
    } else if (policy.equals("token-aware")) {
      policyClass = "BasicLoadBalancingPolicy";
    } else {
      throw new DBException("unknown edgetb.policy " + policy + " (round-robin, token-aware)");
    }
    long timeoutMs = Long.parseLong(p.getProperty("edgetb.timeout_ms", "12000"));
    DriverConfigLoader loader =
        DriverConfigLoader.programmaticBuilder()
            .withString(DefaultDriverOption.LOAD_BALANCING_POLICY_CLASS, policyClass)
            .withString(
                DefaultDriverOption.LOAD_BALANCING_LOCAL_DATACENTER,
                p.getProperty("cassandra.localdc", "datacenter1"))
            .withString(DefaultDriverOption.RETRY_POLICY_CLASS, NoRetryPolicy.class.getName())
            .withDuration(DefaultDriverOption.REQUEST_TIMEOUT, Duration.ofMillis(timeoutMs))
            .withDuration(DefaultDriverOption.CONNECTION_INIT_QUERY_TIMEOUT, Duration.ofSeconds(10))
            .withDuration(DefaultDriverOption.CONTROL_CONNECTION_TIMEOUT, Duration.ofSeconds(10))
            .withDuration(
                DefaultDriverOption.METADATA_SCHEMA_REQUEST_TIMEOUT, Duration.ofSeconds(30))
            .build();
    CqlSessionBuilder builder =
        CqlSession.builder()
            .withConfigLoader(loader)
            .withKeyspace(p.getProperty("cassandra.keyspace", "ycsb"));
    for (String host : hosts.split(",")) {
      builder.addContactPoint(new InetSocketAddress(host.trim(), port));
    }
    String creds = p.getProperty("edgetb.credentials", System.getenv("EDGETB_CREDENTIALS"));
    if (creds != null && !creds.isEmpty()) {
      try {
        JsonNode login = new ObjectMapper().readTree(new File(creds));
        builder.withAuthCredentials(login.get("username").asText(), login.get("password").asText());
      } catch (Exception e) {
        throw new DBException("cannot read the login in " + creds + ": " + e);
      }
    }
    String tls = p.getProperty("edgetb.tls", System.getenv("EDGETB_TLS"));
    if (tls != null && !tls.isEmpty()) {
      try {
        builder.withSslContext(Tls.context(tls));
      } catch (Exception e) {
        throw new DBException("cannot read the TLS files in " + tls + ": " + e);
      }
    }
    try {
      return builder.build();
    } catch (RuntimeException e) {
      throw new DBException("cannot connect to " + hosts + ": " + e);
    }
  }

  private static PreparedStatement prepared(String cql) {
    return PREPARED.computeIfAbsent(cql, q -> session.prepare(q));
  }

  private Status failed(String op, Exception e) {
    ERRORS.computeIfAbsent(op + " " + e.getClass().getSimpleName(), k -> new LongAdder())
        .increment();
    return Status.ERROR;
  }

  private static String columns(Set<String> fields) {
    return fields == null ? "*" : String.join(", ", fields);
  }

  private static void put(Row row, Map<String, ByteIterator> into) {
    for (ColumnDefinition column : row.getColumnDefinitions()) {
      String name = column.getName().asInternal();
      String value = row.getString(name);
      if (!name.equals(KEY) && value != null) {
        into.put(name, new StringByteIterator(value));
      }
    }
  }

  @Override
  public Status read(String table, String key, Set<String> fields, Map<String, ByteIterator> result) {
    return timed(() -> doRead(table, key, fields, result));
  }

  private Status doRead(String table, String key, Set<String> fields, Map<String, ByteIterator> result) {
    try {
      BoundStatement s = prepared(readCql(table, fields)).bind(key).setConsistencyLevel(readCl);
      Row row = session.execute(s).one();
      if (row == null) {
        return Status.NOT_FOUND;
      }
      put(row, result);
      return Status.OK;
    } catch (Exception e) {
      return failed("READ", e);
    }
  }

  @Override
  public Status scan(
      String table, String startkey, int count, Set<String> fields,
      Vector<HashMap<String, ByteIterator>> result) {
    return timed(() -> doScan(table, startkey, count, fields, result));
  }

  private Status doScan(
      String table, String startkey, int count, Set<String> fields,
      Vector<HashMap<String, ByteIterator>> result) {
    try {
      BoundStatement s =
          prepared(scanCql(table, fields)).bind(startkey, count).setConsistencyLevel(readCl);
      ResultSet rows = session.execute(s);
      for (Row row : rows) {
        HashMap<String, ByteIterator> one = new HashMap<>();
        put(row, one);
        result.add(one);
      }
      return Status.OK;
    } catch (Exception e) {
      return failed("SCAN", e);
    }
  }

  @Override
  public Status update(String table, String key, Map<String, ByteIterator> values) {
    return timed(() -> doUpdate(table, key, values));
  }

  private Status doUpdate(String table, String key, Map<String, ByteIterator> values) {
    try {
      List<String> names = new ArrayList<>(values.keySet());
      List<Object> bind = new ArrayList<>();
      for (String name : names) {
        bind.add(values.get(name).toString());
      }
      bind.add(key);
      String cql = updateCql(table, names);
      session.execute(prepared(cql).bind(bind.toArray()).setConsistencyLevel(writeCl));
      return Status.OK;
    } catch (Exception e) {
      return failed("UPDATE", e);
    }
  }

  @Override
  public Status insert(String table, String key, Map<String, ByteIterator> values) {
    return timed(() -> doInsert(table, key, values));
  }

  private Status doInsert(String table, String key, Map<String, ByteIterator> values) {
    try {
      List<String> names = new ArrayList<>(values.keySet());
      List<Object> bind = new ArrayList<>();
      bind.add(key);
      for (String name : names) {
        bind.add(values.get(name).toString());
      }
      String cql = insertCql(table, names);
      session.execute(prepared(cql).bind(bind.toArray()).setConsistencyLevel(writeCl));
      return Status.OK;
    } catch (Exception e) {
      return failed("INSERT", e);
    }
  }

  @Override
  public Status delete(String table, String key) {
    return timed(() -> doDelete(table, key));
  }

  private Status doDelete(String table, String key) {
    try {
      session.execute(prepared(deleteCql(table)).bind(key).setConsistencyLevel(writeCl));
      return Status.OK;
    } catch (Exception e) {
      return failed("DELETE", e);
    }
  }
}
