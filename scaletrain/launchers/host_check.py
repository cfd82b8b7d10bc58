"""Before mpirun starts ranks on other hosts: does each host answer, and can it run scaletrain?

Open MPI starts a daemon on every other host through ssh (or the agent it is told to use,
`OMPI_MCA_plm_rsh_agent` / `--mca plm_rsh_agent`). A host that does not answer then costs a
wait of its own and pages of Open MPI's text naming neither the host's fault nor its fix. So,
first, each such host in turn, all of them at once, a few seconds each:

- its name resolves here ("unknown host" otherwise);
- with ssh: something answers on ssh's port, within CONNECT_S seconds (refused, unreachable
  or silent otherwise) — a plain TCP connect, which needs no ssh at all;
- the agent (ssh in batch mode, with a connect timeout: it never asks for a password) runs
  this Python there and imports scaletrain: a login refused for want of a key, a host key not
  known, the Python or scaletrain missing there, each said as such.

A host mpirun runs here itself (this host's name or one of its addresses) is not checked.
"""

from __future__ import annotations

import os
import shlex
import shutil
import socket
import subprocess
from concurrent.futures import ThreadPoolExecutor
from typing import Mapping, Optional, Sequence

from ..foundation.errors import UsageError
from ..process import netif

#: ssh's port, and how long a host may take to answer there.
SSH_PORT = 22
CONNECT_S = 5.0

#: How long the agent may take to run the import there (a login, a Python start-up, torch not imported).
RUN_S = 20.0

#: ssh's own failures (it exits 255), by a phrase of its message.
SSH_FAILURES = (
    ("Permission denied", "ssh in batch mode was refused the login (no key: give this user a key there, e.g. "
                          "ssh-copy-id {host}, or load one into ssh-agent)"),
    ("Host key verification failed", "its ssh host key is not known here (run `ssh {host}` once and accept it)"),
    ("Could not resolve hostname", "unknown host (its name does not resolve here)"),
    ("Connection refused", "refused: nothing answers on ssh's port"),
    ("Connection timed out", "no answer on ssh's port (down, or a firewall)"),
    ("No route to host", "unreachable from here (no route to it)"),
)


def rsh_agent(environ: Mapping[str, str], launcher_args: Sequence[str] = ()) -> Optional[list[str]]:
    """The command Open MPI reaches other hosts with, where told one (None: ssh)."""
    args = list(launcher_args)
    for i, word in enumerate(args[:-2]):
        if word in ("--mca", "-mca") and args[i + 1] == "plm_rsh_agent":
            return shlex.split(args[i + 2])
    agent = environ.get("OMPI_MCA_plm_rsh_agent")
    return shlex.split(agent) if agent else None


def runs_here(host: str) -> bool:
    """Whether mpirun starts `host`'s ranks itself, without ssh: this host's name or one of its
    addresses (127.0.0.1, not the rest of 127.0.0.0/8, which Open MPI reaches through ssh)."""
    if host in ("localhost", socket.gethostname()):
        return True
    try:
        ip = netif.resolve(host)
    except UsageError:
        return False
    return ip == "127.0.0.1" or any(i.address == ip for i in netif.local_interfaces())


def _port_problem(host: str) -> Optional[str]:
    """What stops a TCP connection to ssh's port there, if anything."""
    try:
        address = socket.getaddrinfo(host, SSH_PORT, type=socket.SOCK_STREAM)[0][4]
    except (socket.gaierror, UnicodeError):
        return "unknown host (its name does not resolve here)"
    try:
        with socket.create_connection(address[:2], timeout=CONNECT_S):
            return None
    except ConnectionRefusedError:
        return f"refused: nothing answers on ssh's port {SSH_PORT}"
    except socket.timeout:
        return f"no answer on ssh's port {SSH_PORT} within {CONNECT_S:g} s (down, or a firewall)"
    except OSError as exc:
        return f"unreachable from here ({exc.strerror or exc})"


def failure(host: str, python: str, returncode: int, stderr: str, agent: str) -> Optional[str]:
    """What a failed `AGENT host python -c 'import scaletrain'` says, in a few words."""
    if returncode == 0:
        return None
    text = stderr.strip()
    if "No module named 'scaletrain'" in text or "No module named scaletrain" in text:
        return f"scaletrain is not installed there for {python} (install it there in the same place as here)"
    if returncode == 127 or "No such file or directory" in text and python in text:
        return f"{python} is not there (every host needs the same Python path, with scaletrain installed)"
    for phrase, said in SSH_FAILURES:
        if phrase in text:
            return said.format(host=host)
    last = text.splitlines()[-1] if text else f"exit status {returncode}"
    return f"{agent} could not run Python there: {last}"


def problem(host: str, python: str, agent: Optional[list[str]]) -> Optional[str]:
    """Why Open MPI could not start ranks on `host`, or None."""
    if agent is None:
        found = _port_problem(host)
        if found:
            return found
        if shutil.which("ssh") is None:
            return "ssh is not installed here, and Open MPI starts the ranks of other hosts with it " \
                   "(apt-get install openssh-client, or give Open MPI an agent: --mca plm_rsh_agent)"
        agent = ["ssh", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={CONNECT_S:g}"]
    remote = f"{shlex.quote(python)} -c {shlex.quote('import scaletrain')}"
    try:
        done = subprocess.run([*agent, host, remote], capture_output=True, text=True, timeout=RUN_S,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return f"{agent[0]} did not finish within {RUN_S:g} s (a login waiting for something?)"
    except OSError as exc:
        return f"{agent[0]} could not be started here ({exc.strerror or exc})"
    return failure(host, python, done.returncode, done.stderr, os.path.basename(agent[0]))


#: (host, python, agent) found able to run ranks by this process: a command that starts several
#: jobs across the same hosts (plan, bench) checks them once.
_answered: set = set()


def check_hosts(hosts: Sequence[str], python: str, environ: Mapping[str, str], launcher_args: Sequence[str] = (),
                flag: str = "--hosts") -> None:
    """Raises one line naming the first host (in the order given) that cannot run ranks, and what failed."""
    agent = rsh_agent(environ, launcher_args)
    key = (python, tuple(agent or ()))
    others = [h for h in dict.fromkeys(hosts) if (h, key) not in _answered and not runs_here(h)]
    if not others:
        return
    with ThreadPoolExecutor(max_workers=min(16, len(others))) as pool:
        found = list(pool.map(lambda h: problem(h, python, agent), others))
    _answered.update((h, key) for h, p in zip(others, found) if p is None)
    failed = [(h, p) for h, p in zip(others, found) if p]
    if failed:
        host, said = failed[0]
        more = f" (and {len(failed) - 1} other host(s) of {flag})" if len(failed) > 1 else ""
        raise UsageError(f"{flag}: host {host} cannot run ranks: {said}{more}; fix it or leave it out of {flag}")
