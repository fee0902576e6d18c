//go:build !unix

package beanstalk

// rusage returns zero CPU times where the system does not report them.
func rusage() (user, system string) { return "0.000000", "0.000000" }
