"""The secret filter (names and values), the in-memory vault and the CLI entry's scrubbed re-exec.

The re-exec is checked in real processes: the same pid before and after, /proc/self/environ without
a secret, the token handed over through a pipe into the vault, the process non-dumpable while it
holds one, and nothing kept for a command line that only measures.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bisector.runner.env import is_secret as runner_is_secret
from bisector.runner.env import scrub as runner_scrub
from bisector.trust import start, vault
from bisector.trust.filter import DEFAULT_TOKEN_ENV, is_secret, scrub, secrets_in

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "ghp_vaultTEST0123456789abcdefghijkl"
OTHER = "ghp_otherTEST0123456789abcdefghijkl"


# ---- the filter -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "GITHUB_TOKEN",
        "BISECTOR_GITHUB_TOKEN",
        "GH_TOKEN",
        "MY_PAT",
        "PAT",
        "GH_PAT",
        "PAT_FOR_CI",
        "bot_pat",
        "DB_PASS",
        "DB_PASSWORD",
        "PGPASSWORD",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_REGION",
        "OPENAI_API_KEY",
        "HF_TOKEN",
        "NPM_TOKEN",
        "SSH_AUTH_SOCK",
        "SENTRY_DSN",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "SSH_PRIVATE",
        "GITHUB_SHA",
        "DOCKER_CREDS",
        "SESSION_COOKIE",
        "NETRC",
        "GIT_ASKPASS",
        "SSH_ASKPASS",
        "KUBECONFIG",
        "DOCKER_CONFIG",
        "PGPASSFILE",
        "SLACK_WEBHOOK_URL",
    ],
)
def test_secret_names(name: str) -> None:
    assert is_secret(name) and is_secret(name, value="harmless")


@pytest.mark.parametrize(
    "name",
    [
        "PATH",
        "PYTHONPATH",
        "LD_LIBRARY_PATH",
        "HOME",
        "PWD",
        "USER",
        "LANG",
        "TMPDIR",
        "PATCH_LEVEL",
        "CUDA_HOME",
        "CUDA_VISIBLE_DEVICES",
        "ROCM_PATH",
        "HIP_VISIBLE_DEVICES",
        "HSA_OVERRIDE_GFX_VERSION",
        "TRITON_CACHE_DIR",
        "TRITON_PRINT_AUTOTUNING",
        "TORCH_CUDA_ARCH_LIST",
        "CC",
        "CXX",
        "MAKEFLAGS",
        "OMP_NUM_THREADS",
        "KEYTIMEOUT",
        "TOKENIZERS_PARALLELISM",
        "PIP_INDEX_URL",
        "PIP_EXTRA_INDEX_URL",
        "COMPATH",
        "SPATIAL",
    ],
)
def test_toolchain_names_are_kept(name: str) -> None:
    assert not is_secret(name, value="/usr/local/cuda")


@pytest.mark.parametrize(
    "value",
    [
        "postgres://app:s3cret@db.internal:5432/prod",  # DATABASE_URL
        "https://ci:hunter2@pypi.internal/simple",  # PIP_INDEX_URL with credentials
        "https://pypi.org/simple https://u:p@mirror/simple",  # a second URL in a list
        "https://:onlypassword@host/x",
        "ghp_" + "a" * 36,
        "gho_" + "b" * 36,
        "ghs_" + "c" * 36,
        "ghu_" + "d" * 36,
        "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz",
        "glpat-abcdefghijklmnopqrst",
        "xoxb-1234567890-abcdefghij",
        "xoxp-1234-5678-abcdefghijkl",
        "AKIAIOSFODNN7EXAMPLE",
        "Bearer ghp_" + "e" * 36,
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3Blbn...",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",  # a JWT
        "https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX",
        "https://discord.com/api/webhooks/123456789012345678/abcdefghijklmnopqrstuvwxyz0123",
        "https://acme.webhook.office.com/webhookb2/0a1b2c3d-4e5f",
        "https://ci.example.com/hooks/build/9f86d081884c7d659a2feaa0c55ad015",
    ],
)
def test_secret_values_under_harmless_names(value: str) -> None:
    assert is_secret("DATABASE_URL", value=value) and is_secret("SOME_SETTING", value=value)
    assert scrub({"SOME_SETTING": value, "PATH": "/usr/bin"}) == {"PATH": "/usr/bin"}


@pytest.mark.parametrize(
    "value",
    [
        "https://pypi.org/simple",
        "https://download.pytorch.org/whl/cu124",
        "git+ssh://git@github.com/org/x.git",
        "http://proxy.internal:3128",
        "http://host:8080/path@v1",
        "/opt/rocm/bin:/usr/bin",
        "sm_90a",
        "ghp",
        "a_ghp_ but not a token",
        "AKIA-short",
        "eyJ",
        "https://example.com/docs/webhooks/intro",
    ],
)
def test_harmless_values_are_kept(value: str) -> None:
    assert not is_secret("PIP_INDEX_URL", value=value)


def test_scrub_keeps_toolchains_and_drops_the_configured_token_whatever_its_name() -> None:
    env = {
        "PATH": "/usr/bin",
        "HOME": "/home/ci",
        "CUDA_HOME": "/usr/local/cuda",
        "TRITON_CACHE_DIR": "/c",
        "PIP_INDEX_URL": "https://pypi.org/simple",
        "DATABASE_URL": "postgres://u:pw@h/db",
        "MY_PAT": "x",
        "BOT": "plain-looking",
        "NOTE": TOKEN,
    }
    assert scrub(env, "BOT") == {
        "PATH": "/usr/bin",
        "HOME": "/home/ci",
        "CUDA_HOME": "/usr/local/cuda",
        "TRITON_CACHE_DIR": "/c",
        "PIP_INDEX_URL": "https://pypi.org/simple",
    }
    assert set(secrets_in(env, "BOT")) == {"DATABASE_URL", "MY_PAT", "BOT", "NOTE"}


def test_the_runner_names_are_the_same_filter() -> None:
    assert runner_is_secret is is_secret and runner_scrub is scrub


# ---- which token a command line may keep ------------------------------------------------------------


def test_needed_names_follow_the_command_line(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('[publish]\ntoken_env = "ACME_BOT_TOKEN"\n')
    both = frozenset({DEFAULT_TOKEN_ENV, "ACME_BOT_TOKEN"})
    assert start.needed_names(["publish", "--plan", "p.json"]) == {DEFAULT_TOKEN_ENV}
    assert start.needed_names(["publish", "--plan", "p.json", f"--config={cfg}"]) == both
    assert start.needed_names(["run", "--config", str(cfg), "--good", "a", "--bad", "b", "--publish"]) == both
    assert start.needed_names(["nightly", "--config", str(cfg)]) == both
    assert start.needed_names(["handle-comment", "--event", "e", "--config", str(cfg), "--authorize-only"]) == both
    # measuring only, or writing payloads to files: no token at all
    assert start.needed_names(["run", "--config", str(cfg), "--good", "a", "--bad", "b"]) == frozenset()
    assert start.needed_names(["nightly", "--config", str(cfg), "--plan-out", "p.json"]) == frozenset()
    assert start.needed_names(["handle-comment", "--config", str(cfg), "--plan-out", "p", "--head-sha", "x"]) == set()
    assert start.needed_names(["publish", "--plan", "p", "--dry-run", "d"]) == frozenset()
    for other in (["build", "--config", str(cfg), "HEAD"], ["demo"], ["--help"], []):
        assert start.needed_names(other) == frozenset()
    # an unreadable config: the default name only (the command itself reports the config)
    assert start.needed_names(["nightly", "--config", str(tmp_path / "missing.toml")]) == {DEFAULT_TOKEN_ENV}


# ---- the re-exec, in real processes -----------------------------------------------------------------

PROBE = textwrap.dedent("""
    import hashlib, json, os, sys
    from bisector.trust import start, vault
    pid = os.getpid()
    start.prepare(sys.argv[1:])
    environ = open("/proc/self/environ", "rb").read().decode()
    kept = vault.publishing_env() if vault.is_sealed() else {}
    print(json.dumps({"pid_before": int(os.environ.get("PID_FROM_PARENT", "0")), "pid": pid,
                      "reexecuted": start.reexecuted, "dumpable": vault.is_dumpable(),
                      "kept": {k: hashlib.sha256(v.encode()).hexdigest() for k, v in kept.items()},
                      "environ": environ, "os_environ": dict(os.environ), "fds": os.listdir("/proc/self/fd")}))
""")


def entry(*argv: str, **extra: str) -> dict:
    """PROBE through the entry's prepare(), in a fresh interpreter with `extra` in its environment."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": str(ROOT),
        "HOME": "/nonexistent",
        "CANARY_SETTING": "visible-canary",
        **extra,
    }
    # exec through `sh -c 'exec ...'` so the pid we know is the interpreter's own
    proc = subprocess.Popen(
        ["sh", "-c", 'PID_FROM_PARENT=$$ exec "$0" "$@"', sys.executable, "-c", PROBE, *argv],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    data = json.loads(out)
    assert data["pid"] == proc.pid == data["pid_before"], "a new process instead of an exec"
    return data


def digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


needs_proc = pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs Linux /proc")


@needs_proc
def test_entry_reexecs_scrubbed_and_keeps_the_token_in_memory_only(tmp_path: Path) -> None:
    data = entry(
        "publish",
        "--plan",
        "p.json",
        BISECTOR_GITHUB_TOKEN=TOKEN,
        GITHUB_TOKEN=OTHER,
        DATABASE_URL="postgres://u:pw@db/x",
        MY_PAT="pat-value",
    )
    assert data["reexecuted"]
    for secret in (TOKEN, OTHER, "postgres://u:pw@db/x", "pat-value"):
        assert secret not in data["environ"] and secret not in json.dumps(data["os_environ"])
    assert "CANARY_SETTING=visible-canary" in data["environ"]  # the rest of the environment is kept
    assert start.VAULT_FD_ENV not in data["os_environ"]  # children never see the hand-over
    assert data["kept"] == {"BISECTOR_GITHUB_TOKEN": digest(TOKEN)}  # only what publishing reads
    assert data["dumpable"] is False
    assert sorted(data["fds"], key=int)[:3] == ["0", "1", "2"] and len(data["fds"]) <= 4  # the pipe is closed


@needs_proc
def test_a_measuring_command_keeps_nothing_and_stays_dumpable() -> None:
    data = entry("nightly", "--config", "c.toml", "--plan-out", "p.json", BISECTOR_GITHUB_TOKEN=TOKEN)
    assert data["reexecuted"] and data["kept"] == {} and data["dumpable"] is True
    assert TOKEN not in data["environ"]


@needs_proc
def test_no_secret_no_reexec() -> None:
    data = entry("publish", "--plan", "p.json")
    assert not data["reexecuted"] and data["kept"] == {} and data["dumpable"] is True


def test_vault_hand_over_round_trip_and_limits() -> None:
    fd = vault.hand_over({"A": "1", "B": "two"})
    assert vault.take_over(fd) == {"A": "1", "B": "two"}
    with pytest.raises(OSError):
        os.fstat(fd)  # closed after reading
    with pytest.raises(vault.VaultError, match="more than the 4096"):
        vault.hand_over({"A": "x" * 5000})
    read, write = os.pipe()
    os.write(write, b"[1, 2]")
    os.close(write)
    with pytest.raises(vault.VaultError, match="not a name -> value object"):
        vault.take_over(read)


def test_publishing_env_is_the_vault_once_sealed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vault, "_sealed", None)
    monkeypatch.setenv("BISECTOR_GITHUB_TOKEN", TOKEN)
    assert vault.publishing_env()["BISECTOR_GITHUB_TOKEN"] == TOKEN  # in-process use: the environment
    vault.seal({})
    assert "BISECTOR_GITHUB_TOKEN" not in vault.publishing_env()  # sealed: never os.environ
    vault.seal({"BISECTOR_GITHUB_TOKEN": OTHER})
    assert dict(vault.publishing_env()) == {"BISECTOR_GITHUB_TOKEN": OTHER}


@needs_proc
@pytest.mark.parametrize(
    "marker, extra, problem",
    [
        ("-", {"GITHUB_TOKEN": TOKEN}, "BISECTOR_VAULT_FD is set but the environment still holds GITHUB_TOKEN"),
        ("0", {}, "BISECTOR_VAULT_FD='0': not the pipe the entry hands over"),
        ("x", {}, "BISECTOR_VAULT_FD='x': not the pipe the entry hands over"),
    ],
)
def test_a_hand_set_marker_is_refused(marker: str, extra: dict[str, str], problem: str) -> None:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": str(ROOT),
        "BISECTOR_VAULT_FD": marker,
        **extra,
    }
    out = subprocess.run(
        [sys.executable, "-m", "bisector", "publish", "--plan", "p.json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert out.returncode == 1 and out.stderr.strip() == f"error: {problem}"
    assert TOKEN not in out.stderr + out.stdout
