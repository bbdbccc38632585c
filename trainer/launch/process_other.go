//go:build !linux

package launch

import "syscall"

// dieWithLauncher: only Linux has a parent-death signal; elsewhere a
// killed launcher's processes live on until their own end.
func dieWithLauncher(*syscall.SysProcAttr) {}
