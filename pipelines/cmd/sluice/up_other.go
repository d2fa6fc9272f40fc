//go:build !unix

package main

import "syscall"

// childProcAttr: the parts of `sluice up` share its console here.
func childProcAttr() *syscall.SysProcAttr { return nil }
