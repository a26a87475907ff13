"""Certificates made with openssl: a CA and the serving certificates it signs, for the
admission webhooks of the operators benchmarks/peers.py compares with (rljob_testenv.peers).
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path


class PkiError(RuntimeError):
    """openssl failed; the message carries its output."""


def _openssl(*args: str) -> None:
    result = subprocess.run(["openssl", *args], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise PkiError(f"openssl {args[0]} failed: {result.stderr.strip()}")


def create_ca(pki: Path, name: str = "rljob-testenv-ca", dns: tuple[str, ...] = ()) -> None:
    """A self-signed CA; `dns` names go into its subjectAltName (some tools check a CA by one)."""
    pki.mkdir(parents=True, exist_ok=True)
    extra = ["-addext", "subjectAltName=" + ",".join(f"DNS:{d}" for d in dns)] if dns else []
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "3650",
        "-keyout", str(pki / "ca.key"), "-out", str(pki / "ca.crt"),
        "-subj", f"/CN={name}", *extra,
    )  # fmt: skip


def issue(
    pki: Path,
    name: str,
    subject: str,
    ips: tuple[str, ...] = (),
    dns: tuple[str, ...] = (),
    server: bool = False,
) -> tuple[Path, Path]:
    """A key and certificate `<name>.crt` signed by the CA; a client certificate unless `server`."""
    key, cert = pki / f"{name}.key", pki / f"{name}.crt"
    usage = "serverAuth,clientAuth" if server else "clientAuth"
    ext = [f"extendedKeyUsage={usage}"]
    sans = [f"DNS:{d}" for d in dns] + [f"IP:{ip}" for ip in ips]
    if sans:
        ext.append("subjectAltName=" + ",".join(sans))
    with tempfile.TemporaryDirectory() as tmp:
        csr, extfile = Path(tmp) / "req.csr", Path(tmp) / "ext.cnf"
        extfile.write_text("\n".join(ext) + "\n")
        _openssl(
            "req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr),
            "-subj", subject,
        )  # fmt: skip
        _openssl(
            "x509", "-req", "-in", str(csr), "-CA", str(pki / "ca.crt"),
            "-CAkey", str(pki / "ca.key"), "-CAcreateserial", "-days", "3650",
            "-out", str(cert), "-extfile", str(extfile),
        )  # fmt: skip
    return cert, key


def pkcs1_key(key: Path) -> bytes:
    """An RSA key in the traditional PKCS#1 PEM form, which some Go tools insist on."""
    out = key.with_name(key.stem + "-pkcs1.key")
    _openssl("rsa", "-in", str(key), "-traditional", "-out", str(out))
    return out.read_bytes()
