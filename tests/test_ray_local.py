"""The local Ray cluster that ``--engine ray`` starts listens on the loopback address only."""

import ipaddress
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

PROBE = '''
import json, psutil, ray
from grade.batch import connect
assert connect(num_cpus=1)
ray.get(ray.remote(lambda: 1).remote())  # a worker process is up too
me = psutil.Process()
pids = {p.pid for p in me.children(recursive=True)} | {me.pid}
listening = [(c.laddr.ip, c.laddr.port, psutil.Process(c.pid).name()) for c in psutil.net_connections(kind="tcp")
             if c.status == psutil.CONN_LISTEN and c.pid in pids]
print(json.dumps(listening))
ray.shutdown()
'''


@pytest.mark.slow
def test_the_local_ray_cluster_listens_on_loopback_only():
    pytest.importorskip("ray")
    psutil = pytest.importorskip("psutil")
    # A fresh process: the Ray tests elsewhere may have a cluster running in this one.
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(Path.home())})
    assert out.returncode == 0, out.stderr[-3000:]
    import json

    listening = json.loads(out.stdout.strip().splitlines()[-1])
    names = {name for _, _, name in listening}
    assert {"gcs_server", "raylet"} <= names, listening  # the cluster's own servers were found
    for ip, port, name in listening:
        address = ipaddress.ip_address(ip)
        mapped = getattr(address, "ipv4_mapped", None)
        assert (mapped or address).is_loopback, f"{name} listens on {ip}:{port}"
