"""One spawn, from the wire's request to its two audit records.

- `request`: the request as plain values and `prepare()`, which validates and
  resolves everything before anything runs (argv, cwd, environment, limits,
  the executable);
- `spawn`: the `Spawn` lifecycle, given its dependencies as one `SpawnDeps`;
- `report`: the `Outcome` and `Report` of how a spawn ended, and the
  classification of an exit status into them;
- `records`: the `process.exec` and `process.exit` audit records;
- `output`: the kept head and tail of each output stream;
- `environment`, `executable`, `limits`: the pieces `prepare()` applies.

The tenant runtime (`hostcapd.tenant`) admits requests and owns the spawns'
tasks; nothing here imports it.
"""
