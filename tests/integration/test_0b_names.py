"""Host names that are also `ip` keywords ("a" = address) build correctly."""

from testbed import Testbed, Topology

from .conftest import assert_no_residue


def test_keyword_like_host_names_build_and_reach_each_other():
    topo = Topology(edge_nodes=2, edge_names=("a", "dev"), endpoint_name="name")
    with Testbed(topo, cassandra=None) as tb:
        run_id = tb.run_id
        out = tb.exec("name", ["ip", "-o", "-4", "addr", "show", "dev", "eth0"]).stdout
        assert tb.address("name") + "/24" in out
        # TCP across the bridge: a listener on "dev", a connect from "a"
        server = tb.popen(
            "dev",
            [
                "python3",
                "-c",
                "import socket;s=socket.socket();s.bind(('0.0.0.0',5555));"
                "s.listen();c,_=s.accept();c.sendall(b'hi')",
            ],
        )
        try:
            client = tb.exec(
                "a",
                [
                    "python3",
                    "-c",
                    "import socket,time\n"
                    "for _ in range(100):\n"
                    "  try:\n"
                    f"    s=socket.create_connection(('{tb.address('dev')}',5555),1);break\n"
                    "  except OSError: time.sleep(0.05)\n"
                    "print(s.recv(2).decode())",
                ],
            )
            assert client.stdout.strip() == "hi"
        finally:
            server.wait(timeout=10)
    assert_no_residue(run_id)
