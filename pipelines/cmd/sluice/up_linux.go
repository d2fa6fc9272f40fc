package main

import "syscall"

// childProcAttr puts a part of `sluice up` in a process group of its own,
// so that a Ctrl-C at the terminal reaches sluice up alone (which stops
// the parts in order), and has the kernel send it SIGTERM if sluice up
// dies without stopping it (SIGKILL): no part outlives it.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}
