// Command servercost counts the instructions redis-server executes per
// expset operation, beside the recipes a user would write instead, by
// running the server under valgrind's callgrind: exact and independent of
// the machine's load, where time-based figures on a shared machine swing
// 2-4x. Every expset path is driven through the library itself (what users
// run), from a few goroutines at once.
//
//	go run ./bench/cmd/servercost                  # every path and recipe, 10,000 calls each, 2 runs
//	go run ./bench/cmd/servercost -levers          # also the script variants of bench/testdata/levers
//	go run ./bench/cmd/servercost -n 500 -runs 1   # a quick check (CI)
//
// Each workload runs on an emptied keyspace: its state is seeded, the
// counters are zeroed, the calls are made, the counters are dumped, and the
// total is divided by the calls (or members swept, or requests). The total
// covers the whole server: reading and parsing commands, running them,
// writing replies. Compare by ratio. Counts repeat within about 1% from run
// to run; the tables print every run and the largest difference.
//
// Without valgrind it prints one line saying so and exits 0.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

func main() {
	if err := mainErr(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "servercost:", err)
		os.Exit(1)
	}
}

func mainErr(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("servercost", flag.ContinueOnError)
	fs.SetOutput(stderr)
	n := fs.Int("n", 10000, "calls per workload (the server runs ~50x slower under callgrind: 5,000-20,000)")
	runs := fs.Int("runs", 2, "runs of every workload, to show the counts repeat")
	goroutines := fs.Int("goroutines", 8, "goroutines making the calls at once")
	only := fs.String("only", "", "measure only the workloads whose name matches this regular expression")
	levers := fs.Bool("levers", false, "also measure the script variants of bench/testdata/levers")
	fs.DurationVar(&ttl, "ttl", ttl, "the TTL of every member written (a run slower than it sees seeded members expire)")
	server := fs.String("redis-server", "redis-server", "the redis-server binary")
	profile := fs.String("profile", "", "copy each workload's callgrind dump into this directory, for callgrind_annotate")
	testdata := fs.String("testdata", defaultTestdata(), "the directory of the Lua copies (bench/testdata)")
	commands := fs.Bool("commands", false, "also print the commands each workload ran per unit (INFO commandstats; those scripts run included)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *profile != "" {
		if err := os.MkdirAll(*profile, 0o755); err != nil {
			return err
		}
	}
	if *n < 100 || *runs < 1 || *goroutines < 1 || ttl < time.Minute {
		return fmt.Errorf("want -n >= 100, -runs >= 1, -goroutines >= 1, -ttl >= 1m")
	}
	var match *regexp.Regexp
	if *only != "" {
		var err error
		if match, err = regexp.Compile(*only); err != nil {
			return fmt.Errorf("-only: %w", err)
		}
	}
	if _, _, err := tools(); err != nil {
		fmt.Fprintln(stdout, "servercost: skipped: valgrind (callgrind) is not installed, so server instructions cannot be counted (apt-get install valgrind)")
		return nil
	}
	srv, err := startCounted(*server)
	if err != nil {
		return err
	}
	defer srv.stop()
	rdb := redis.NewClient(&redis.Options{Addr: srv.addr, PoolSize: *goroutines, ReadTimeout: time.Minute, WriteTimeout: time.Minute})
	defer rdb.Close()
	ctx := context.Background()
	version, err := serverVersion(ctx, rdb)
	if err != nil {
		return err
	}

	e := newEnv(rdb, *n, *goroutines, *testdata)
	ws, err := workloads(e, *levers)
	if err != nil {
		return err
	}
	if match != nil {
		var keep []workload
		for _, w := range ws {
			if match.MatchString(w.name) {
				keep = append(keep, w)
			}
		}
		ws = keep
		if len(ws) == 0 {
			return fmt.Errorf("-only %q matches no workload", *only)
		}
	}
	res := make([][]float64, len(ws))
	for r := 0; r < *runs; r++ {
		for i, w := range ws {
			start := time.Now()
			keep := ""
			if *profile != "" {
				keep = filepath.Join(*profile, strings.ReplaceAll(w.name, "/", "_")+"."+strconv.Itoa(r+1)+".callgrind")
			}
			v, stats, err := measure(ctx, srv, e, w, keep)
			if err != nil {
				return err
			}
			res[i] = append(res[i], v)
			fmt.Fprintf(stderr, "run %d  %-40s %10.0f instructions/%s  (%.1fs)\n", r+1, w.name, v, w.unit, time.Since(start).Seconds())
			if *commands {
				fmt.Fprintf(stderr, "       commands per %s: %s\n", w.unit, stats)
			}
		}
	}
	fmt.Fprintf(stdout, "server instructions per operation: redis-server %s under callgrind, %d calls per workload, %d goroutines, limit %d, ttl %v\n\n",
		version, *n, *goroutines, limit, ttl)
	writeTable(stdout, ws, res)
	return nil
}

// workloads lists every workload measured, in table order.
func workloads(e *env, levers bool) ([]workload, error) {
	recipes, err := recipeWorkloads(e)
	if err != nil {
		return nil, err
	}
	var ws []workload
	for _, p := range acquirePaths {
		ws = append(ws, p.workload())
	}
	ws = append(ws, acquireManyWorkload())
	ws = append(ws, setWorkloads()...)
	ws = append(ws, sweepWorkloads()...)
	ws = append(ws, consumeWorkloads()...)
	ws = append(ws, lifeWorkload())
	jw, err := jobWorkloads(e)
	if err != nil {
		return nil, err
	}
	ws = append(ws, jw...)
	ws = append(ws, recipes...)
	lw, err := limitWorkloads(e)
	if err != nil {
		return nil, err
	}
	ws = append(ws, lw...)
	if levers {
		lw, err := leverWorkloads(e)
		if err != nil {
			return nil, err
		}
		ws = append(ws, lw...)
	}
	return ws, nil
}

func serverVersion(ctx context.Context, rdb *redis.Client) (string, error) {
	info, err := rdb.Info(ctx, "server").Result()
	if err != nil {
		return "", err
	}
	m := regexp.MustCompile(`(?m)^redis_version:(\S+)`).FindStringSubmatch(info)
	if m == nil {
		return "", fmt.Errorf("INFO server has no redis_version")
	}
	return m[1], nil
}

// defaultTestdata is bench/testdata beside this command's source, or
// bench/testdata under the working directory.
func defaultTestdata() string {
	if _, file, _, ok := runtime.Caller(0); ok {
		dir := filepath.Join(filepath.Dir(file), "..", "..", "testdata")
		if _, err := os.Stat(dir); err == nil {
			return dir
		}
	}
	return filepath.Join("bench", "testdata")
}
