"""What keeps code under test in: the fence, the sandbox (namespaces, mount view, seccomp), cgroups
and the memory watch, orphans ended, files opened without following what it planted, the benches
snapshot it imports, and the untrusted message lines it sends. Nothing here runs a trial: the
runner (bisector/runner/) and the build steps (bisector/build/) start their processes through it."""
