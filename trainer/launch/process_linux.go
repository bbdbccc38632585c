package launch

import "syscall"

// dieWithLauncher has the kernel SIGKILL the process once the process that
// started it dies: a launcher killed whole (kill -9 of `ringside exec`, as
// of a pod) takes its trainers along instead of leaving them training on,
// orphaned, in a job that has moved on.
func dieWithLauncher(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
