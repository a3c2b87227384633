package main

// memfd_create(2): Go 1.19's syscall package names it only on some
// architectures.
const sysMemfdCreate = 319
