"""Which sessions run what is written into them (issue 31).

A session's program is approved when the session starts, as any spawn is.
What is written into its input afterwards is data to most programs (`cat`,
`sort`, `tee`), but to a shell, an interpreter, a database shell, a
debugger or an editor with a shell escape it is a program: writing into
such a session runs arbitrary code, and approval treats each write as a
process of its own (`hostcap.approval`).

The list is written down here, and is deliberately broad: a program that is
not on it is treated as reading data. It is the approval policy's
`INTERPRETERS` (shells, interpreters, launchers: `env`, `sudo`, `xargs`,
`timeout`, ... whose input or arguments may name a program) and
`INPUT_INTERPRETERS` below. A name matches with or without a version
suffix (`python3`, `python3.12`, `ruby3.2`) and by its basename when a path.
"""

from __future__ import annotations

import posixpath
import re

from hostcap.approval import INTERPRETERS, is_interpreter

#: Programs that take a language on their input, beyond `INTERPRETERS`:
#: REPLs, database shells (psql's `\!`, sqlite3's `.shell`), debuggers,
#: editors and pagers with a shell escape (vi's `:!`, less's `!`), remote
#: and multiplexing shells.
INPUT_INTERPRETERS: frozenset[str] = frozenset(
    {
        # shells and REPLs not already listed
        "rbash", "yash", "xonsh", "nu", "elvish", "rc", "es",
        "ipython", "bpython", "ptpython", "jupyter", "irb", "pry", "erl", "iex", "elixir",
        "scala", "sbt", "clojure", "clj", "lein", "sbcl", "clisp", "ecl", "guile", "racket",
        "chicken", "csi", "ocaml", "utop", "swipl", "gforth", "octave", "matlab", "maxima",
        "gp", "sage", "kotlin", "kotlinc", "groovysh", "groovy", "dotnet", "mono", "csharp",
        "php-cgi", "rlwrap", "dc", "gdb", "lldb", "pdb", "jdb", "node-inspect", "rr",
        # database shells
        "psql", "mysql", "mariadb", "sqlite3", "sqlite", "duckdb", "redis-cli", "mongo",
        "mongosh", "cqlsh", "sqlplus", "clickhouse-client", "clickhouse", "influx", "usql",
        # editors and pagers with a shell escape
        "vi", "vim", "nvim", "view", "ex", "ed", "red", "emacs", "nano", "pico", "joe", "mg",
        "less", "more", "most", "man", "info", "mail", "mailx",
        # remote, multiplexing and job-running shells
        "ssh", "telnet", "ftp", "sftp", "lftp", "tmux", "screen", "at", "batch", "crontab",
        "parallel", "su", "login",
    }
)  # fmt: skip
_VERSION_SUFFIX = re.compile(r"[0-9][0-9.]*$")


def input_runs_code(command: str) -> bool:
    """Whether what is written into a session running `command` is a program."""
    if is_interpreter(command):
        return True
    name = posixpath.basename(command)
    stripped = _VERSION_SUFFIX.sub("", name).rstrip("-.")
    return name in INPUT_INTERPRETERS or stripped in INPUT_INTERPRETERS


#: Every name on the list, for the docs and a test.
ALL_INPUT_INTERPRETERS: frozenset[str] = INTERPRETERS | INPUT_INTERPRETERS
