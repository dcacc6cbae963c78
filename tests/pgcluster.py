"""A throwaway PostgreSQL 15 cluster for tests that must read logs a real server wrote.

`PgCluster` runs `initdb`, `pg_ctl` and `psql` as subprocesses (the project has no database
driver). The server listens on 127.0.0.1 on a free port and on a unix socket in the cluster's
own directory, and logs to stderr, csvlog and jsonlog files at once in `PgCluster.log_dir`.

Authentication (`pg_hba.conf`, see `DEFAULT_HBA`):

* unix socket: `trust` for every role, so `psql()` connects as the superuser `postgres` with no
  password; an unknown role over the socket gives ``FATAL:  role "x" does not exist``;
* TCP 127.0.0.1: `scram-sha-256`; a wrong password gives ``FATAL:  password authentication failed
  for user "x"``, an unknown role gives the same line with ``DETAIL:  Role "x" does not exist.``;
* TCP to the database `HBA_REJECT_DB` ("hba_reject", need not exist) hits a `reject` line:
  ``FATAL:  pg_hba.conf rejects connection for host "127.0.0.1", ...``;
* a replication connection (``db="dbname=postgres replication=true"``) matches no line:
  ``FATAL:  no pg_hba.conf entry for replication connection from host ...``.

When the test process is root, the server programs run as the `postgres` OS user (PostgreSQL
refuses to run as root) and the cluster lives in a private directory under /tmp if `postgres`
cannot reach `base_dir` (pytest's tmp_path is mode 0700 under root); `base_dir/"pgcluster"` then
links to it, and close() copies the logs back to `base_dir/"log"` (where `log_dir` then points). Otherwise everything
runs as the current user inside `base_dir`.

Typical use (in tests/integration, through the `pg_cluster_factory` fixture)::

    cluster = pg_cluster_factory({"log_min_duration_statement": "0"})
    cluster.psql("SELECT 1/0;", app_name="app")          # failing statements do not raise
    mark = len(cluster.log_text("json"))
    cluster.psql("SELECT 1", user="alice", password="bad", host_tcp=True, check=False)
    cluster.wait_for_log(r"password authentication failed", "json", after=mark)
    files = cluster.log_files("csv")                      # sorted by name (= start time)

Every started cluster is registered for an `atexit` shutdown, so an interrupted test
run never leaves a postmaster behind.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pwd
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Protocol

from tests.harness import LOOPBACK, free_port

PG_MAJOR = 15
PG_BIN_DEFAULT = Path(f"/usr/lib/postgresql/{PG_MAJOR}/bin")
PG_BIN_ENV = "PGCLUSTER_PG_BIN"
NOT_INSTALLED_REASON = f"PostgreSQL {PG_MAJOR} is not installed: run scripts/install-test-deps.sh as root"
SUPERUSER = "postgres"
SERVER_OS_USER = "postgres"
HBA_REJECT_DB = "hba_reject"

DEFAULT_HBA = f"""\
# Written by tests/pgcluster.py.
# TYPE  DATABASE        USER  ADDRESS          METHOD
local   all             all                    trust
host    {HBA_REJECT_DB:<15} all   {LOOPBACK}/32     reject
host    all             all   {LOOPBACK}/32     scram-sha-256
# No replication lines: a replication connection logs "no pg_hba.conf entry".
"""

# Settings every cluster starts with; the `settings` argument overrides any of them.
DEFAULT_SETTINGS: dict[str, str] = {
    "listen_addresses": LOOPBACK,
    "logging_collector": "on",
    "log_destination": "stderr,csvlog,jsonlog",
    "log_filename": "postgresql-%Y%m%d_%H%M%S.log",
    "log_rotation_age": "0",
    "log_rotation_size": "0",
    "log_line_prefix": "%m [%p] %q%u@%d/%a ",
    "lc_messages": "C",
    "log_timezone": "UTC",
    "timezone": "UTC",
    "log_min_duration_statement": "-1",
    "log_connections": "on",
    "log_disconnections": "on",
    "log_checkpoints": "on",
    "log_lock_waits": "on",
    "deadlock_timeout": "200ms",
    "log_temp_files": "0",
    "log_autovacuum_min_duration": "0",
    "max_connections": "20",
    # Durability is irrelevant for a throwaway cluster and fsync makes every test slower.
    "fsync": "off",
    "shared_buffers": "16MB",
}

_STOP_MODES = ("smart", "fast", "immediate")
_SOCKET_PATH_MAX = 100  # sun_path is 108 bytes; keep a margin for ".s.PGSQL.NNNNN.lock"
_POLL_INTERVAL = 0.05
_LOG_EXT = {"log", "csv", "json"}

_live: set[PgCluster] = set()


def find_pg_bin() -> Path | None:
    """Return the PostgreSQL 15 bin directory ($PGCLUSTER_PG_BIN or the Debian path), or None."""
    candidate = Path(os.environ.get(PG_BIN_ENV) or PG_BIN_DEFAULT)
    needed = ("initdb", "pg_ctl", "postgres", "psql")
    if all(os.access(candidate / name, os.X_OK) for name in needed):
        return candidate
    return None


def missing_requirement() -> str | None:
    """Why no cluster can be started here, or None when everything is in place."""
    if find_pg_bin() is None:
        return NOT_INSTALLED_REASON
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(SERVER_OS_USER)
        except KeyError:
            return f"running as root and there is no '{SERVER_OS_USER}' OS user to run PostgreSQL"
    return None


def _quote(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def process_exited(pid: int) -> bool:
    """Whether the process is gone or a zombie (a postmaster reparented to a lazy reaper)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        return False
    # The state follows the parenthesised command name; a zombie (Z) or dead (X) process has exited.
    return stat.rsplit(")", 1)[-1].split()[0] in ("Z", "X")


def _wait_exited(pid: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not process_exited(pid):
        if time.monotonic() >= deadline:
            raise PgClusterError(f"postmaster {pid} still running {timeout}s after shutdown")
        time.sleep(_POLL_INTERVAL)


@atexit.register
def _kill_leftovers() -> None:
    for cluster in list(_live):
        with contextlib.suppress(Exception):
            cluster.close()


class PgClusterFactory(Protocol):
    """The `pg_cluster_factory` fixture: makes a cluster (started unless start=False)."""

    def __call__(
        self,
        settings: Mapping[str, str | int] | None = None,
        *,
        start: bool = True,
        hba: str | None = None,
        name: str | None = None,
        locale_dir: Path | None = None,
    ) -> PgCluster: ...


class PgClusterError(RuntimeError):
    """A cluster operation failed; the message carries the relevant output."""


class PgCluster:
    """A throwaway PostgreSQL 15 cluster on loopback that logs to stderr, csvlog and jsonlog."""

    def __init__(
        self,
        base_dir: Path,
        settings: Mapping[str, str | int] | None = None,
        *,
        hba: str | None = None,
        pg_bin: Path | None = None,
        dev_log: Path | None = None,
        locale_dir: Path | None = None,
    ) -> None:
        """`dev_log`: a syslog socket the server sees as /dev/log (see `_start_with_dev_log`; root only).
        `locale_dir`: compiled locales (`localedef`) the server may name in lc_messages (glibc's LOCPATH)."""
        bin_dir = pg_bin or find_pg_bin()
        if bin_dir is None:
            raise PgClusterError(NOT_INSTALLED_REASON)
        self.pg_bin = bin_dir
        self.base_dir = Path(base_dir).absolute()
        self.hba = DEFAULT_HBA if hba is None else hba
        self.dev_log = dev_log
        self.locale_dir = locale_dir
        self._as_root = os.geteuid() == 0
        self._server_user = SERVER_OS_USER if self._as_root else pwd.getpwuid(os.geteuid()).pw_name
        self._pw = pwd.getpwnam(self._server_user)
        self._settings: dict[str, str] = dict(DEFAULT_SETTINGS)
        self._settings.update({k: str(v) for k, v in (settings or {}).items()})
        self._port = 0
        self._initialized = False
        self._closed = False
        self._background: list[subprocess.Popen[str]] = []
        self._private_root = False
        self._private_sock = False
        self.root = self.base_dir
        self.sock_dir = self.root / "run"

    # ----------------------------------------------------------------- layout / properties

    @property
    def data_dir(self) -> Path:
        """The cluster's PGDATA."""
        return self.root / "data"

    @property
    def log_dir(self) -> Path:
        """Absolute directory PostgreSQL writes its .log/.csv/.json files to (log_directory)."""
        return self.root / "log"

    @property
    def startup_log(self) -> Path:
        """pg_ctl's -l file: what the postmaster prints before the logging collector takes over."""
        return self.root / "pg_ctl.log"

    @property
    def port(self) -> int:
        """The TCP port (also the unix socket's number); 0 before the first start()."""
        return self._port

    @property
    def host(self) -> str:
        """The TCP address the server listens on."""
        return LOOPBACK

    @property
    def socket_dir(self) -> Path:
        """The directory holding the unix socket (unix_socket_directories)."""
        return self.sock_dir

    @property
    def superuser(self) -> str:
        """The bootstrap superuser role."""
        return SUPERUSER

    @property
    def settings(self) -> dict[str, str]:
        """The settings written to the cluster's configuration (defaults plus overrides)."""
        return dict(self._settings)

    @property
    def running(self) -> bool:
        """Whether the postmaster is up (per pg_ctl status)."""
        if not self._initialized:
            return False
        result = self._run_server_tool(["pg_ctl", "status", "-D", str(self.data_dir)], check=False)
        return result.returncode == 0

    @property
    def postmaster_pid(self) -> int | None:
        """The postmaster's pid from postmaster.pid, or None when it is not running."""
        try:
            first = (self.data_dir / "postmaster.pid").read_text().split("\n", 1)[0]
        except (FileNotFoundError, IndexError):
            return None
        return int(first) if first.strip().isdigit() else None

    def conninfo(self, *, db: str = "postgres", user: str | None = None, host_tcp: bool = False) -> str:
        """A libpq connection string for this cluster (no password)."""
        host = LOOPBACK if host_tcp else str(self.sock_dir)
        return f"host={host} port={self._port} dbname={db} user={user or SUPERUSER} sslmode=disable"

    # ----------------------------------------------------------------- lifecycle

    def start(self) -> None:
        """Create the cluster on first use, then start it and wait until it accepts connections."""
        self._check_open()
        if not self._initialized:
            self._init()
        elif self.running:
            return
        _live.add(self)  # from here on the atexit safety net covers this cluster
        for _attempt in range(5):
            if self._port == 0:
                self._port = free_port()
                self._write_config()
            log_mark = len(self.log_text("log"))
            result = self._pg_ctl_start()
            if result.returncode == 0:
                return
            # The logging collector starts before the sockets are bound: look in both places.
            output = self._startup_tail() + self.log_text("log")[log_mark:][-4000:]
            if "could not bind" in output or "could not create lock file" in output:
                # Another process took the port between free_port() and the bind: pick again.
                self._port = 0
                continue
            raise PgClusterError(f"pg_ctl start failed ({result.returncode}):\n{result.stdout}{output}")
        raise PgClusterError(f"no free port after 5 attempts:\n{self._startup_tail()}")

    def stop(self, mode: Literal["smart", "fast", "immediate"] = "fast") -> None:
        """Stop the server (pg_ctl stop -m MODE) and wait for it; a stopped server is left alone."""
        if mode not in _STOP_MODES:
            raise ValueError(f"mode must be one of {_STOP_MODES}, not {mode!r}")
        pid = self.postmaster_pid if self._initialized else None
        if pid is None:
            return
        argv = ["pg_ctl", "stop", "-D", str(self.data_dir), "-m", mode, "-w", "-t", "60"]
        self._run_server_tool(argv, check=False, timeout=90)
        if self.postmaster_pid is not None and self.running:
            raise PgClusterError(f"pg_ctl stop -m {mode} did not stop the server")
        # pg_ctl returns once postmaster.pid is gone, a moment before the process exits.
        _wait_exited(pid, timeout=10)

    def restart(self, mode: Literal["smart", "fast", "immediate"] = "fast") -> None:
        """Stop (fast by default) and start again on the same port.

        The new postmaster opens log files named after its start time, so it appends to the same
        files when the restart falls in the same second.
        """
        self.stop(mode)
        self.start()

    def reload(self) -> None:
        """Send SIGHUP (pg_ctl reload) so PostgreSQL rereads its configuration files."""
        self._require_started()
        self._run_server_tool(["pg_ctl", "reload", "-D", str(self.data_dir)])

    def kill(self) -> None:
        """Immediate shutdown (pg_ctl stop -m immediate): no shutdown checkpoint, recovery on start."""
        self.stop("immediate")

    def set_settings(self, settings: Mapping[str, str | int]) -> None:
        """Change settings in the config file; call reload() or restart() to apply them."""
        self._settings.update({k: str(v) for k, v in settings.items()})
        if self._initialized:
            self._write_config()

    def close(self) -> None:
        """Stop the server if needed and remove the cluster; the logs stay in `log_dir` under base_dir."""
        if self._closed:
            return
        self._closed = True
        for proc in self._background:
            if proc.poll() is None:
                proc.kill()
            with contextlib.suppress(Exception):
                proc.communicate(timeout=5)
        try:
            if self._initialized:
                try:
                    self.stop("fast")
                except (PgClusterError, subprocess.TimeoutExpired):
                    self._force_kill()
        finally:
            _live.discard(self)
            self._remove_files()

    def __enter__(self) -> PgCluster:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"PgCluster(root={str(self.root)!r}, port={self._port})"

    # ----------------------------------------------------------------- clients

    def psql(
        self,
        sql: str,
        *,
        db: str = "postgres",
        user: str | None = None,
        password: str | None = None,
        host_tcp: bool = False,
        check: bool = True,
        timeout: float = 30,
        app_name: str | None = None,
        on_error_stop: bool = False,
    ) -> subprocess.CompletedProcess[str]:
        """Run a SQL script through psql (stdin, one statement after another).

        Failing statements do not stop the script (ON_ERROR_STOP off) and leave psql's exit code
        at 0; `check` raises `subprocess.CalledProcessError` only when psql itself fails, e.g. a
        rejected login (exit 2). `db` may also be a conninfo string ("dbname=x replication=true").
        """
        self._require_started()
        return subprocess.run(
            self._psql_argv(db, user, host_tcp, on_error_stop),
            input=sql,
            capture_output=True,
            text=True,
            env=self._client_env(password, app_name),
            timeout=timeout,
            check=check,
            cwd=self.root,
        )

    def query(self, sql: str, *, db: str = "postgres", user: str | None = None, timeout: float = 30) -> str:
        """Run one query over the socket and return its unaligned, tuples-only output, stripped."""
        self._require_started()
        argv = [*self._psql_argv(db, user, False, True), "--no-align", "--tuples-only", "-c", sql]
        result = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            env=self._client_env(None, None),
            timeout=timeout,
            cwd=self.root,
            check=False,
        )
        if result.returncode != 0 or result.stderr.strip():
            raise PgClusterError(f"query failed ({result.returncode}): {sql}\n{result.stderr}")
        return result.stdout.strip()

    def psql_bg(
        self,
        sql: str | None = None,
        *,
        db: str = "postgres",
        user: str | None = None,
        password: str | None = None,
        host_tcp: bool = False,
        app_name: str | None = None,
    ) -> subprocess.Popen[str]:
        """Start a psql session in the background for concurrent work (lock waits, deadlocks).

        `sql` (if given) is written at once; write more with ``proc.stdin.write(...)`` followed by
        ``proc.stdin.flush()`` (psql runs each complete line as it arrives), and end the session
        with ``proc.communicate()``. Sessions still open at close() are killed.
        """
        self._require_started()
        proc = subprocess.Popen(
            self._psql_argv(db, user, host_tcp, False),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
            env=self._client_env(password, app_name),
            cwd=self.root,
        )
        self._background.append(proc)
        if sql is not None:
            assert proc.stdin is not None
            proc.stdin.write(sql if sql.endswith("\n") else sql + "\n")
            proc.stdin.flush()
        return proc

    def wait_for_sql(self, sql: str, expect: str = "t", *, db: str = "postgres", timeout: float = 10) -> None:
        """Poll a query until its output equals `expect` (e.g. a backend waiting on a lock)."""
        deadline = time.monotonic() + timeout
        last = ""
        while True:
            last = self.query(sql, db=db)
            if last == expect:
                return
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{sql!r} gave {last!r}, not {expect!r}, within {timeout}s")
            time.sleep(_POLL_INTERVAL)

    # ----------------------------------------------------------------- logs

    def log_files(self, ext: str = "log") -> list[Path]:
        """The server's log files with this extension ("log", "csv" or "json"), sorted by name."""
        if ext not in _LOG_EXT:
            raise ValueError(f"ext must be one of {sorted(_LOG_EXT)}, not {ext!r}")
        if not self.log_dir.is_dir():
            return []
        return sorted(p for p in self.log_dir.glob(f"postgresql-*.{ext}") if p.is_file())

    def log_text(self, ext: str = "log") -> str:
        """All log files with this extension, concatenated in name (= time) order."""
        return "".join(p.read_bytes().decode("utf-8", "replace") for p in self.log_files(ext))

    def wait_for_log(
        self, pattern: str | re.Pattern[str], ext: str = "log", timeout: float = 10, *, after: int = 0
    ) -> re.Match[str]:
        """Poll the log text until `pattern` matches at or after character offset `after`.

        Pass ``after=len(cluster.log_text(ext))`` taken before an action to look only at what the
        action logged. Raises TimeoutError with the end of the log.
        """
        regex = re.compile(pattern, re.MULTILINE) if isinstance(pattern, str) else pattern
        deadline = time.monotonic() + timeout
        while True:
            text = self.log_text(ext)
            match = regex.search(text, after)
            if match:
                return match
            if time.monotonic() >= deadline:
                tail = text[-3000:]
                raise TimeoutError(f"{regex.pattern!r} not in the .{ext} log within {timeout}s; end:\n{tail}")
            time.sleep(_POLL_INTERVAL)

    # ----------------------------------------------------------------- internals

    def _check_open(self) -> None:
        if self._closed:
            raise PgClusterError("cluster is closed")

    def _require_started(self) -> None:
        if not self._initialized or self._port == 0:
            raise PgClusterError("cluster not started: call start() first")

    def _server_can_use(self, path: Path) -> bool:
        if not self._as_root:
            return True
        # Every ancestor must be searchable by the server user: check through that user itself.
        result = subprocess.run(
            ["test", "-x", str(path)],
            user=self._pw.pw_uid,
            group=self._pw.pw_gid,
            extra_groups=[],
            check=False,
            cwd="/",
        )
        return result.returncode == 0

    def _prepare_dirs(self) -> None:
        self.base_dir.mkdir(parents=True, exist_ok=True)
        if self._server_can_use(self.base_dir):
            self.root = self.base_dir
        else:
            self.root = Path(tempfile.mkdtemp(prefix="pgcluster-", dir="/tmp"))
            self._private_root = True
            link = self.base_dir / "pgcluster"
            with contextlib.suppress(OSError):
                link.symlink_to(self.root, target_is_directory=True)
        if self.data_dir.exists():
            raise PgClusterError(f"{self.data_dir} already exists: one cluster per base_dir")
        self.sock_dir = self.root / "run"
        if len(str(self.sock_dir / ".s.PGSQL.65535")) > _SOCKET_PATH_MAX:
            self.sock_dir = Path(tempfile.mkdtemp(prefix="pgs-", dir="/tmp"))
            self._private_sock = True
        for directory in (self.root, self.data_dir, self.log_dir, self.sock_dir):
            directory.mkdir(mode=0o700, exist_ok=True)
            if self._as_root:
                os.chown(directory, self._pw.pw_uid, self._pw.pw_gid)

    def _init(self) -> None:
        self._prepare_dirs()
        self._run_server_tool(
            [
                "initdb",
                "-D",
                str(self.data_dir),
                "-U",
                SUPERUSER,
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
                "--encoding=UTF8",
                "--locale=C",
                "--no-sync",
                "--no-instructions",
            ],
            timeout=120,
        )
        self._initialized = True
        self._server_write(self.data_dir / "pg_hba.conf", self.hba)
        with (self.data_dir / "postgresql.conf").open("a") as conf:
            conf.write("\n# tests/pgcluster.py: every test setting lives in the included file.\n")
            conf.write("include 'pgcluster.conf'\n")

    def _write_config(self) -> None:
        values = dict(self._settings)
        values["port"] = str(self._port)
        values["unix_socket_directories"] = str(self.sock_dir)
        values["log_directory"] = str(self.log_dir)
        lines = ["# Written by tests/pgcluster.py; rewritten by set_settings()."]
        lines += [f"{name} = {_quote(value)}" for name, value in values.items()]
        self._server_write(self.data_dir / "pgcluster.conf", "\n".join(lines) + "\n")

    def _server_write(self, path: Path, text: str) -> None:
        path.write_text(text)
        path.chmod(0o600)
        if self._as_root:
            os.chown(path, self._pw.pw_uid, self._pw.pw_gid)

    def _pg_ctl_start(self) -> subprocess.CompletedProcess[str]:
        if self.startup_log.exists():
            self.startup_log.unlink()
        argv = ["pg_ctl", "start", "-D", str(self.data_dir), "-l", str(self.startup_log), "-w", "-t", "60"]
        if self.dev_log is not None:
            return self._start_with_dev_log(argv, self.dev_log)
        return self._run_server_tool(argv, check=False, timeout=90)

    def _start_with_dev_log(self, argv: list[str], dev_log: Path) -> subprocess.CompletedProcess[str]:
        """Start the server in a private mount namespace whose /dev/log is `dev_log`.

        PostgreSQL's syslog() writes to /dev/log; giving the server one of the test's own leaves the
        host's syslog alone. The namespace's /dev is a tmpfs holding the few devices a server opens
        (the host's, bind-mounted) and the link; /dev/shm is gone, so the cluster needs
        dynamic_shared_memory_type = mmap. Needs root (mount namespaces); the server still runs as
        the server OS user.
        """
        if not self._as_root:
            raise PgClusterError("dev_log needs root: a mount namespace is how the server gets its own /dev/log")
        real_dev = self.root / "realdev"
        real_dev.mkdir(exist_ok=True)
        script = (
            'set -e; mount --rbind /dev "$0"; mount -t tmpfs -o mode=755 none /dev; '
            'for n in null zero full random urandom; do touch /dev/$n; mount --bind "$0/$n" /dev/$n; done; '
            'ln -s "$1" /dev/log; shift; exec "$@"'
        )
        as_server = ["setpriv", f"--reuid={self._pw.pw_uid}", f"--regid={self._pw.pw_gid}", "--clear-groups"]
        return subprocess.run(
            [
                *("unshare", "--mount", "--propagation", "private", "sh", "-c", script, str(real_dev), str(dev_log)),
                *as_server,
                str(self.pg_bin / argv[0]),
                *argv[1:],
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=self._server_env(),
            cwd=self.root,
            timeout=90,
            check=False,
        )

    def _startup_tail(self) -> str:
        try:
            return self.startup_log.read_text(errors="replace")[-4000:]
        except FileNotFoundError:
            return ""

    def _server_env(self) -> dict[str, str]:
        return {
            "PATH": f"{self.pg_bin}:/usr/bin:/bin",
            "LANG": "C",
            "LC_ALL": "C",
            "HOME": self._pw.pw_dir,
            "USER": self._server_user,
            "LOGNAME": self._server_user,
            "TZ": "UTC",
        } | ({"LOCPATH": str(self.locale_dir)} if self.locale_dir is not None else {})

    def _run_server_tool(
        self, argv: list[str], *, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """Run a PostgreSQL server program as the server OS user."""
        env = self._server_env()
        kwargs: dict[str, Any] = {}
        if self._as_root:
            kwargs = {"user": self._pw.pw_uid, "group": self._pw.pw_gid, "extra_groups": []}
        result = subprocess.run(
            [str(self.pg_bin / argv[0]), *argv[1:]],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            cwd=self.root,
            timeout=timeout,
            check=False,
            **kwargs,
        )
        if check and result.returncode != 0:
            raise PgClusterError(f"{argv[0]} failed ({result.returncode}):\n{result.stdout}")
        return result

    def _psql_argv(self, db: str, user: str | None, host_tcp: bool, on_error_stop: bool) -> list[str]:
        return [
            str(self.pg_bin / "psql"),
            "-X",
            "-w",
            "-h",
            LOOPBACK if host_tcp else str(self.sock_dir),
            "-p",
            str(self._port),
            "-U",
            user or SUPERUSER,
            "-d",
            db,
            "-v",
            f"ON_ERROR_STOP={1 if on_error_stop else 0}",
        ]

    def _client_env(self, password: str | None, app_name: str | None) -> dict[str, str]:
        # Drop inherited libpq variables (PGHOST, PGPASSWORD, PGSERVICE, ...) so they cannot leak in.
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env.update({"PGSSLMODE": "disable", "PGCONNECT_TIMEOUT": "10", "LC_ALL": "C", "LANG": "C"})
        if password is not None:
            env["PGPASSWORD"] = password
        if app_name is not None:
            env["PGAPPNAME"] = app_name
        return env

    def _force_kill(self) -> None:
        with contextlib.suppress(Exception):
            self.stop("immediate")
        pid = self.postmaster_pid
        if pid is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)

    def _remove_files(self) -> None:
        if self._private_sock:
            shutil.rmtree(self.sock_dir, ignore_errors=True)
        if self._private_root:
            # Keep the logs next to the test for post-mortems (log_dir then points there).
            if self.log_dir.is_dir():
                with contextlib.suppress(OSError):
                    shutil.copytree(self.log_dir, self.base_dir / "log", dirs_exist_ok=True)
            shutil.rmtree(self.root, ignore_errors=True)
            with contextlib.suppress(OSError):
                (self.base_dir / "pgcluster").unlink()
            self.root = self.base_dir
        else:
            shutil.rmtree(self.data_dir, ignore_errors=True)
            if not self._private_sock:
                shutil.rmtree(self.sock_dir, ignore_errors=True)
