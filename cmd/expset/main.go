// Command expset is the demo and operator tool of the expset library.
//
// Usage:
//
//	expset demo [--redis URL] [--ttl 3s]
//	expset inspect [--redis URL] [--json] NAME OWNER
//	expset stats [--redis URL] [--json] [--watch[=5s]] [--serve ADDR] NAME
//	expset sweep [--redis URL] [--json] [--once] NAME
//	expset events [--redis URL] [--json] NAME tail|dead|kick|drop [ID...] [--all] [--yes]
//
// Flags may come before or after the arguments ("--" ends them). Run "expset
// help" or "expset COMMAND --help" for each command's flags and an example.
// Exit codes: 0 success (also a long-running command stopped by SIGINT or
// SIGTERM), 1 failure, 2 bad usage, 3 no such set, member or dead letter.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"

	"github.com/expset/expset"
)

// command is one subcommand.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

var commands = map[string]command{
	"demo":    {"play the unpaid-orders checkout story (embedded Redis by default)", runDemo},
	"inspect": {"show one owner's members, deadlines and time left, expired-but-unswept marked", runInspect},
	"stats":   {"per shard: owners, due members, sweeper lag, events waiting, pending, dead; --watch, --serve /metrics", runStats},
	"sweep":   {"run a sweeper in the foreground (until SIGINT, or --once), with progress and a summary", runSweep},
	"events":  {"tail expiry events without consuming them; list, kick or drop dead letters", runEvents},
}

var (
	// errUsage marks a usage error: exit code 2.
	errUsage = errors.New("usage")
	// errNotFound marks something named on the command line that is not
	// there (a dead letter's ID): exit code 3, like expset.ErrNotFound.
	errNotFound = errors.New("not found")
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes one command line and returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(stdout)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "expset: unknown command %q\n\n", args[0])
		usage(stderr)
		return 2
	}
	err := c.run(ctx, args[1:], stdout, stderr)
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "expset %s: %v\n", args[0], err)
		return 2
	case errors.Is(err, expset.ErrNotFound), errors.Is(err, errNotFound):
		fmt.Fprintf(stderr, "expset %s: %v\n", args[0], err)
		return 3
	default:
		fmt.Fprintf(stderr, "expset %s: %v\n", args[0], err)
		return 1
	}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "expset: bounded pending sets on Redis: demo and operator tool")
	fmt.Fprintln(w, "\nUsage: expset COMMAND [flags] [args]\n\nCommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-8s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nRedis is given with --redis URL (or REDIS_URL): redis://[:password@]host:port[/db],")
	fmt.Fprintln(w, "or several comma-separated host:port addresses for a Redis Cluster.")
	fmt.Fprintln(w, "Run 'expset COMMAND --help' for a command's flags and an example.")
}

// newFlags returns a flag set for a command whose --help prints the synopsis
// and example.
func newFlags(name, synopsis, example string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: expset %s\n\nFlags:\n", synopsis)
		fs.PrintDefaults()
		fmt.Fprintf(stderr, "\nExample:\n  %s\n", strings.ReplaceAll(example, "\n", "\n  "))
	}
	return fs
}

// parseFlags parses args, mapping a parse failure to errUsage. Flags may
// come before, between or after the arguments ("expset events orders kick
// --all"); after "--" everything is an argument. fs.Args() holds the
// arguments afterwards.
func parseFlags(fs *flag.FlagSet, args []string) error {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return err
			}
			return fmt.Errorf("%w: %v", errUsage, err)
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			pos = append(pos, rest...)
			break
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
	return fs.Parse(append([]string{"--"}, pos...))
}
