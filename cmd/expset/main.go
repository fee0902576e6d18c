// Command expset is the demo and operator tool of the expset library.
//
// Usage:
//
//	expset demo [--redis URL] [--ttl 3s] [--keep]
//	expset inspect [--redis URL] [--json] [--limit N] NAME OWNER
//	expset stats [--redis URL] [--json] [--watch[=5s]] [--serve ADDR] NAME
//	expset sweep [--redis URL] [--json] [--once] NAME
//	expset events tail|dead|kick|drop [--redis URL] [--json] NAME [ID...] [--all] [--yes]
//	expset groups [running|remove|pause|resume|paused] [--redis URL] [--json] NAME [GROUP [OWNER]]
//	expset job [--redis URL] [--json] NAME ID
//	expset schedules [--redis URL] [--json] NAME
//	expset web [--redis URL] [--listen ADDR] [--allow-changes] [--demo] [SET...]
//	expset beanstalkd [--redis URL] [--listen ADDR] [-z BYTES] [--prefix P]
//	expset version
//
// Flags may come before or after the arguments ("--" ends them). Run "expset
// help" or "expset COMMAND --help" for each command's flags and an example.
// Exit codes: 0 success (also a long-running command stopped by SIGINT or
// SIGTERM), 1 failure, 2 bad usage, 3 no such set, member or dead letter.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/expset/expset"
	"github.com/spf13/cobra"
)

var (
	// errUsage marks a usage error: exit code 2.
	errUsage = errors.New("usage")
	// errNotFound marks something named on the command line that is not
	// there (a set, a dead letter's ID): exit code 3.
	errNotFound = errors.New("not found")
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// app is what every command shares: where to write, and the global flags.
type app struct {
	stdout, stderr io.Writer
	redis          string // --redis
	cluster        bool   // --cluster
}

// run executes one command line and returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	a := &app{stdout: stdout, stderr: stderr}
	root := a.rootCmd()
	if len(args) == 0 {
		usage(root, stderr)
		return 2
	}
	args = verbFirst(args)
	root.SetArgs(args)
	started := false
	root.PersistentPreRun = func(*cobra.Command, []string) { started = true }
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return 0
	}
	name := "expset"
	if cmd != nil {
		name = cmd.CommandPath()
	}
	fmt.Fprintf(stderr, "%s: %v\n", name, hint(err))
	return exitCode(err, started)
}

// exitCode maps an error to the exit code: 2 for usage (also any error cobra
// found before the command ran: an unknown command or flag, a wrong number
// of arguments), 3 for what is not there, 1 for everything else.
func exitCode(err error, started bool) int {
	switch {
	case !started, errors.Is(err, errUsage),
		errors.Is(err, expset.ErrInvalidArgument):
		return 2
	case errors.Is(err, errNotFound), errors.Is(err, expset.ErrNotFound):
		return 3
	default:
		return 1
	}
}

// rootCmd builds the command tree.
func (a *app) rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "expset",
		Short:         "bounded pending sets on Redis: demo and operator tool",
		SilenceErrors: true,
		SilenceUsage:  true,
		Version:       version(),
	}
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	root.SetVersionTemplate("{{.Version}}\n")
	root.CompletionOptions.HiddenDefaultCmd = true
	root.PersistentFlags().StringVar(&a.redis, "redis", "", redisFlagHelp)
	root.PersistentFlags().BoolVar(&a.cluster, "cluster", false, "--redis names one node of a Redis Cluster: use it as the cluster's seed")
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return fmt.Errorf("%w: %v (run '%s --help' for its flags)", errUsage, err, c.CommandPath())
	})
	root.SetUsageTemplate(strings.Replace(root.UsageTemplate(), "Examples:", "Example:", 1))
	defaultHelp := root.HelpFunc()
	root.SetHelpFunc(func(c *cobra.Command, args []string) {
		if c == root {
			usage(root, a.stdout)
			return
		}
		c.SetOut(a.stderr) // a command's help goes with its diagnostics
		defaultHelp(c, args)
	})
	root.AddCommand(a.demoCmd(), a.inspectCmd(), a.statsCmd(), a.sweepCmd(), a.eventsCmd(), a.groupsCmd(), a.jobCmd(), a.schedulesCmd(), a.webCmd(), a.beanstalkdCmd(), a.versionCmd())
	indentExamples(root)
	return root
}

// indentExamples indents the examples of c and its subcommands under
// their "Example:" heading.
func indentExamples(c *cobra.Command) {
	if c.Example != "" {
		c.Example = "  " + strings.ReplaceAll(c.Example, "\n", "\n  ")
	}
	for _, sub := range c.Commands() {
		indentExamples(sub)
	}
}

// usage prints the commands and the forms of --redis.
func usage(root *cobra.Command, w io.Writer) {
	fmt.Fprintln(w, "expset: bounded pending sets on Redis: demo and operator tool")
	fmt.Fprintln(w, "\nUsage: expset COMMAND [flags] [args]\n\nCommands:")
	width := 0
	for _, c := range root.Commands() {
		if c.IsAvailableCommand() {
			width = max(width, len(c.Name()))
		}
	}
	for _, c := range root.Commands() {
		if c.IsAvailableCommand() {
			fmt.Fprintf(w, "  %-*s %s\n", width, c.Name(), c.Short)
		}
	}
	fmt.Fprintln(w, "\nRedis is given with --redis URL (or REDIS_URL): redis://[user:password@]host:port[/db]")
	fmt.Fprintln(w, "(rediss:// for TLS; host:port alone means redis://host:port). A Redis Cluster:")
	fmt.Fprintln(w, "redis://[user:password@]host:port?addr=host2:port2&addr=host3:port3, several")
	fmt.Fprintln(w, "comma-separated host:port, or one node's URL with --cluster.")
	fmt.Fprintln(w, "Run 'expset COMMAND --help' for a command's flags and an example.")
}

// args checks a command's positional arguments: the names given ("NAME
// OWNER"), those in brackets optional ("NAME GROUP [OWNER]"), as a usage
// error that says what was wanted and shows the command's synopsis.
func args(names string) cobra.PositionalArgs {
	most := len(strings.Fields(names))
	want := most - strings.Count(names, "[")
	return func(c *cobra.Command, got []string) error {
		if most == 0 && len(got) > 0 {
			return fmt.Errorf("%w: unexpected arguments %q: %s", errUsage, got, c.UseLine())
		}
		if len(got) < want || len(got) > most {
			return fmt.Errorf("%w: want %s, got %d arguments: %s", errUsage, names, len(got), c.UseLine())
		}
		return nil
	}
}

// eventsVerbs are the subcommands of "expset events".
var eventsVerbs = []string{"tail", "dead", "kick", "drop"}

// verbFirst moves the verb of "expset events" right after "events", so that
// flags may also come before it (cobra finds a subcommand before it knows
// the subcommand's flags): "events --json dead NAME" is "events dead --json
// NAME". The verb is the first argument that is not a flag or a flag's value.
func verbFirst(args []string) []string {
	if len(args) < 2 || args[0] != "events" {
		return args
	}
	for i := 1; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return args
		case strings.HasPrefix(a, "-"):
			flag := strings.TrimLeft(a, "-")
			if !strings.Contains(flag, "=") && slices.Contains([]string{"redis", "limit", "shard"}, flag) {
				i++ // the flag's value
			}
		case i == 1 || !slices.Contains(eventsVerbs, a):
			return args
		default:
			out := append([]string{"events", a}, args[1:i]...)
			return append(out, args[i+1:]...)
		}
	}
	return args
}
