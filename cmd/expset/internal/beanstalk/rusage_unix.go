//go:build unix

package beanstalk

import (
	"fmt"
	"syscall"
)

// rusage returns the process's user and system CPU time as stats shows them.
func rusage() (user, system string) {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return fmt.Sprintf("%d.%06d", ru.Utime.Sec, ru.Utime.Usec), fmt.Sprintf("%d.%06d", ru.Stime.Sec, ru.Stime.Usec)
}
