"""Ray's token authentication as rljob turns it on in a Ray gang's pods, against Ray itself.

The variables the launcher renders into every pod (RAY_AUTH_MODE, RAY_AUTH_TOKEN_PATH) and a
token as the operator makes it are given to a real `ray start --head` on this machine (the
Secret's mount is a file here): the head then refuses a client without the job's token, on
its GCS and on its dashboard's job API, and admits one with it. What no network plugin here
enforces (the NetworkPolicy), this does in Ray itself.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

from builders import job_ref, make_job
from kube_steps import free_port, wait_for
from rljob_operator.api.spec import parse_spec
from rljob_operator.launcher import ray
from rljob_operator.launcher.pods import desired_secret
from rljob_operator.reconcile.act import with_fresh_secrets
from rljob_testenv.localray import RAY


def dashboard_status(port: int, token: str | None) -> int:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/api/jobs/")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return answer.status
    except urllib.error.HTTPError as refused:
        return refused.code
    except OSError:
        return 0  # not listening yet


def test_a_ray_head_started_as_rljob_starts_it_refuses_clients_without_the_jobs_token(tmp_path):
    job = make_job(framework="verl", command=["python3", "-m", "verl.trainer.main_ppo"])
    spec = parse_spec(job["spec"])
    rendered = ray.env(spec, "grpo-n0.grpo.ns.svc", 0)
    assert rendered["RAY_AUTH_TOKEN_PATH"] == f"{ray.TOKEN_DIR}/{ray.TOKEN_KEY}"
    secret = desired_secret(spec, job_ref(job), "grpo-ray-token-test")
    token = with_fresh_secrets(secret)["stringData"][ray.TOKEN_KEY]
    (tmp_path / "secret").mkdir()
    (tmp_path / "secret" / ray.TOKEN_KEY).write_text(token)
    (tmp_path / "home").mkdir()  # no ~/.ray of the host's (Ray would read a token there)
    plain = {**os.environ, "HOME": str(tmp_path / "home"), "RAY_USAGE_STATS_ENABLED": "0"}
    plain = {k: v for k, v in plain.items() if not k.startswith("RAY_AUTH")}
    pod = {**plain, "RAY_AUTH_MODE": rendered["RAY_AUTH_MODE"],
           "RAY_AUTH_TOKEN_PATH": str(tmp_path / "secret" / ray.TOKEN_KEY)}  # fmt: skip
    gcs, dashboard = free_port(), free_port()
    temp = Path(tempfile.mkdtemp(prefix="rjtok-", dir="/tmp"))  # Ray's sockets: 107 bytes at most
    head = subprocess.Popen(
        [str(RAY), "start", "--head", f"--port={gcs}", f"--dashboard-port={dashboard}",
         "--dashboard-host=127.0.0.1", "--include-dashboard=true", "--num-cpus=1", "--block",
         f"--temp-dir={temp}", "--disable-usage-stats"],
        env=pod, stdout=(tmp_path / "head.log").open("wb"), stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    try:

        def admitted() -> bool:
            assert head.poll() is None, f"ray start exited with {head.returncode}"
            return dashboard_status(dashboard, token) == 200

        wait_for(admitted, 180, "the head's dashboard, with the job's token", 0.5)

        assert dashboard_status(dashboard, None) == 401  # no token
        assert dashboard_status(dashboard, "not-the-jobs-token") == 403  # a wrong one
        client = f"import ray; ray.init(address='127.0.0.1:{gcs}', logging_level='ERROR')"
        without = subprocess.run([sys.executable, "-c", client], env=plain, capture_output=True,
                                 text=True, timeout=120)  # fmt: skip
        assert without.returncode != 0
        assert "Authentication token is missing or incorrect" in without.stderr
        with_token = subprocess.run([sys.executable, "-c", client + "; print(len(ray.nodes()))"],
                                    env=pod, capture_output=True, text=True, timeout=120)  # fmt: skip
        assert with_token.returncode == 0, with_token.stderr
        assert with_token.stdout.strip().splitlines()[-1] == "1"
    finally:
        with contextlib.suppress(ProcessLookupError):  # its own session: no other Ray is touched
            os.killpg(head.pid, signal.SIGKILL)
        head.wait(30)
        shutil.rmtree(temp, ignore_errors=True)
        print((tmp_path / "head.log").read_text(errors="replace")[-2000:])
