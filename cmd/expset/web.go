package main

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"
)

// webOpts are the flags of "expset web".
type webOpts struct {
	listen       string
	allowChanges bool
	token        string // --token or $EXPSET_WEB_TOKEN
	basicAuth    string // --basic-auth USER:PASSWORD or $EXPSET_WEB_BASIC_AUTH
	demo         bool
}

func (a *app) webCmd() *cobra.Command {
	var o webOpts
	cmd := &cobra.Command{
		Use:   "web [--redis URL] [--listen ADDR] [--allow-changes] [--token T | --basic-auth U:P] [--demo] [SET...]",
		Short: "a web page for operators: sets, shards, groups, rates and dead letters (read-only by default)",
		Long: "web serves a page showing the sets named (every set recorded in Redis when none is) until interrupted:\n" +
			"per shard owners, members due, oldest overdue, events, pending, dead letters and the sweeper's lease;\n" +
			"per consumer group lag, pending and consumers; rates of expiries, deliveries and dead letters over the\n" +
			"last five minutes; an owner's members; dead letters with filters, their payloads, and (with\n" +
			"--allow-changes) kicking or deleting them, pausing or resuming groups, and resuming owners paused. It listens on 127.0.0.1:8080 by default; an address beyond\n" +
			"this machine needs --token or --basic-auth. --demo fills a Redis of its own (or --redis) with a\n" +
			"demo set that keeps moving.",
		Example: "expset web --demo                                      # http://127.0.0.1:8080, a demo set, nothing to set up\n" +
			"expset web --redis redis://localhost:6380 orders       # read-only view of the set orders\n" +
			"expset web --redis redis://r:6379 --allow-changes --listen 0.0.0.0:8080 --token \"$(openssl rand -hex 16)\"",
		RunE: func(cmd *cobra.Command, sets []string) error {
			if o.token == "" {
				o.token = os.Getenv("EXPSET_WEB_TOKEN")
			}
			if o.basicAuth == "" {
				o.basicAuth = os.Getenv("EXPSET_WEB_BASIC_AUTH")
			}
			return a.web(cmd.Context(), o, sets)
		},
	}
	cmd.Flags().StringVar(&o.listen, "listen", "127.0.0.1:8080", "address to serve on; one beyond this machine needs --token or --basic-auth")
	cmd.Flags().BoolVar(&o.allowChanges, "allow-changes", false, "allow kicking and deleting dead letters, pausing and resuming consumer groups, resuming their owners (read-only without it)")
	cmd.Flags().StringVar(&o.token, "token", "", "require this shared token: the password of HTTP basic auth (any user name) or an Authorization: Bearer header (default $EXPSET_WEB_TOKEN)")
	cmd.Flags().StringVar(&o.basicAuth, "basic-auth", "", "require HTTP basic auth with this USER:PASSWORD (default $EXPSET_WEB_BASIC_AUTH)")
	cmd.Flags().BoolVar(&o.demo, "demo", false, "start a Redis of its own (redis-server from PATH, else embedded) or use --redis, with a demo set that keeps moving")
	return cmd
}

// isLoopback reports whether addr (host:port) listens on this machine only.
// An empty host listens on every interface.
func isLoopback(addr string) (bool, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false, fmt.Errorf("%w: --listen %q: %v; want host:port, like 127.0.0.1:8080", errUsage, addr, err)
	}
	if host == "localhost" {
		return true, nil
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback(), nil
}

// checkWebOpts checks the flags before anything is opened.
func checkWebOpts(o webOpts) (loopback bool, err error) {
	loopback, err = isLoopback(o.listen)
	if err != nil {
		return false, err
	}
	if o.token != "" && o.basicAuth != "" {
		return false, fmt.Errorf("%w: --token and --basic-auth: give one", errUsage)
	}
	if o.basicAuth != "" {
		if u, p, ok := strings.Cut(o.basicAuth, ":"); !ok || u == "" || p == "" {
			return false, fmt.Errorf("%w: --basic-auth: want USER:PASSWORD, both non-empty", errUsage)
		}
	}
	if !loopback && o.token == "" && o.basicAuth == "" {
		return false, fmt.Errorf("%w: --listen %s reaches beyond this machine: give --token (or EXPSET_WEB_TOKEN) or --basic-auth USER:PASSWORD, "+
			"or listen on 127.0.0.1", errUsage, o.listen)
	}
	return loopback, nil
}

func (a *app) web(ctx context.Context, o webOpts, names []string) error {
	loopback, err := checkWebOpts(o)
	if err != nil {
		return err
	}
	var c *conn
	if o.demo {
		c, names, err = a.webDemo(ctx, names)
	} else {
		c, err = a.connect(ctx, false)
	}
	if err != nil {
		return err
	}
	defer c.close()
	if len(names) == 0 {
		names, err = discoverSets(ctx, c.rdb)
		if err != nil {
			return fmt.Errorf("list the sets in %s: %w", c.desc, err)
		}
		if len(names) == 0 {
			return fmt.Errorf("%w: no set recorded in %s: name the sets to show, or check --redis", errNotFound, c.desc)
		}
	}
	srv, err := newWebServer(ctx, c, names, o, loopback, a.stderr)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("--listen %s: %w", o.listen, err)
	}
	mode := "read-only (start with --allow-changes to kick or delete dead letters, pause or resume groups, resume owners)"
	if o.allowChanges {
		mode = "changes allowed: dead letters can be kicked and deleted, groups paused and resumed, owners resumed"
	}
	fmt.Fprintf(a.stdout, "expset web: serving %d set(s) of %s on http://%s/ until interrupted; %s\n", len(names), c.desc, ln.Addr(), mode)
	return srv.serve(ctx, ln)
}

// webServer serves the page.
type webServer struct {
	rdb          redis.UniversalClient
	desc         string
	sets         []*webSet
	byName       map[string]*webSet
	allowChanges bool
	loopback     bool   // listening on this machine only: Host must name it (no DNS rebinding)
	token        string // a shared token, or ""
	user, pass   string // basic auth, or ""
	csrf         string // the token every change must carry
	logMu        sync.Mutex
	log          io.Writer
}

func newWebServer(ctx context.Context, c *conn, names []string, o webOpts, loopback bool, log io.Writer) (*webServer, error) {
	s := &webServer{rdb: c.rdb, desc: c.desc, byName: map[string]*webSet{}, allowChanges: o.allowChanges,
		loopback: loopback, token: o.token, log: log}
	s.user, s.pass, _ = strings.Cut(o.basicAuth, ":")
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	s.csrf = hex.EncodeToString(b)
	for _, n := range names {
		if s.byName[n] != nil {
			continue
		}
		w, err := openWebSet(ctx, c, n)
		if err != nil {
			return nil, err
		}
		s.sets = append(s.sets, w)
		s.byName[n] = w
	}
	return s, nil
}

// serve serves on ln until ctx ends, sampling the sets' counters meanwhile.
func (s *webServer) serve(ctx context.Context, ln net.Listener) error {
	sctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); sample(sctx, s.sets) }()
	defer func() { cancel(); wg.Wait() }()

	srv := &http.Server{Handler: s.handler(), ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return fmt.Errorf("serve on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	shut, stop := context.WithTimeout(context.Background(), 5*time.Second)
	defer stop()
	if err := srv.Shutdown(shut); err != nil {
		return fmt.Errorf("shut down the page: %w", err)
	}
	if err := <-done; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// logf writes one timestamped line to the log (stderr).
func (s *webServer) logf(format string, args ...any) {
	s.logMu.Lock()
	defer s.logMu.Unlock()
	fmt.Fprintf(s.log, "%s expset web: %s\n", time.Now().UTC().Format(time.RFC3339), fmt.Sprintf(format, args...))
}

// handler routes the page's requests behind guard.
func (s *webServer) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", s.index)
	mux.HandleFunc("GET /set", s.overview)
	mux.HandleFunc("GET /owner", s.owner)
	mux.HandleFunc("GET /dead", s.deadList)
	mux.HandleFunc("GET /letter", s.letter)
	mux.HandleFunc("POST /dead", s.deadAct)
	mux.HandleFunc("POST /groups", s.groupAct)
	mux.Handle("GET /static/", http.FileServerFS(webAssets))
	return s.guard(mux)
}

// guard sets the headers every answer carries, refuses a Host that is not
// this machine when listening on loopback (a DNS rebinding page would name
// its own), and asks for the token or the basic auth when one is set.
func (s *webServer) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "same-origin")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Cache-Control", "no-store")
		if s.loopback && !loopbackHost(r.Host) {
			http.Error(w, "expset web: Host "+r.Host+" is not this machine: open http://127.0.0.1:PORT/", http.StatusMisdirectedRequest)
			return
		}
		if !s.authorized(r) {
			h.Set("WWW-Authenticate", `Basic realm="expset", charset="UTF-8"`)
			http.Error(w, "expset web: authorization required", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// loopbackHost reports whether a Host header names this machine.
func loopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// authorized checks the token (as basic auth's password or a bearer token)
// or the basic auth, when one is set.
func (s *webServer) authorized(r *http.Request) bool {
	same := func(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }
	switch {
	case s.token != "":
		if bearer, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
			return same(bearer, s.token)
		}
		_, p, ok := r.BasicAuth()
		return ok && same(p, s.token)
	case s.user != "":
		u, p, ok := r.BasicAuth()
		return ok && same(u, s.user) && same(p, s.pass)
	}
	return true
}

// sameOrigin reports whether a POST comes from this page: the browser's
// Sec-Fetch-Site, else its Origin, else its Referer, names this origin. A
// request with none of them is refused.
func sameOrigin(r *http.Request) error {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" {
		return fmt.Errorf("Sec-Fetch-Site is %q", site)
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		ref := r.Header.Get("Referer")
		if ref == "" {
			return errors.New("neither Origin nor Referer")
		}
		origin = ref
		if i := strings.Index(ref, "://"); i >= 0 {
			if j := strings.IndexByte(ref[i+3:], '/'); j >= 0 {
				origin = ref[:i+3+j]
			}
		}
	}
	if origin != "http://"+r.Host && origin != "https://"+r.Host {
		return fmt.Errorf("origin %q is not this page's (%s)", origin, r.Host)
	}
	return nil
}
