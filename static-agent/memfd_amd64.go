package main

// memfd_create(2): Go 1.19's syscall package names it only on some
// architectures.
const sysMemfdCreate = 319

// seccomp(2), missing from Go 1.19's syscall package on amd64.
const sysSeccomp = 317
