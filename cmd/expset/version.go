package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version describes this build: the command's module version, the version
// of the expset library it was built with and the Go toolchain, as the build
// recorded them ("(devel)" for a build from a work tree).
func version() string {
	cli, lib := "(devel)", "(devel)"
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			cli = bi.Main.Version
		}
		for _, d := range bi.Deps {
			if d.Path == "github.com/expset/expset" {
				lib = d.Version
				if d.Replace != nil {
					lib += " => " + d.Replace.Path
				}
			}
		}
	}
	return fmt.Sprintf("expset %s (library github.com/expset/expset %s, %s %s/%s)", cli, lib, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

func (a *app) versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "version",
		Short:   "print the versions of this command, the library it was built with, and Go",
		Args:    args(""),
		Example: "expset version\nexpset --version",
		RunE: func(*cobra.Command, []string) error {
			_, err := fmt.Fprintln(a.stdout, version())
			return err
		},
	}
}
