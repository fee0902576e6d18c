package main

import (
	"bytes"
	"context"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/expset/expset"
	"github.com/expset/expset/internal/store"
)

//go:embed web
var webFiles embed.FS

// webAssets serves web/static as /static/.
var webAssets = func() fs.FS {
	f, err := fs.Sub(webFiles, "web")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	return f
}()

var webTemplates = template.Must(template.New("").Funcs(template.FuncMap{
	"when":    func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05.000Z") },
	"ago":     ago,
	"age":     age,
	"dur":     func(d time.Duration) string { return d.Round(time.Millisecond).String() },
	"num":     num,
	"plural":  plural,
	"chart":   chart,
	"payload": viewPayload,
	"q":       func(kv ...string) template.URL { return query(kv...) },
	"pause": func(csrf, set, group, owner string, paused bool) pauseForm {
		return pauseForm{CSRF: csrf, Set: set, Group: group, Owner: owner, OwnerBase64: exact(owner), Paused: paused}
	},
}).ParseFS(webFiles, "web/*.html"))

// pauseForm is what the template "pauseform" draws: the button that
// resumes (Paused) or pauses consumer group Group of set Set, or Owner in
// it, with the page's CSRF token, posting to groupAct.
type pauseForm struct {
	CSRF, Set, Group, Owner string
	OwnerBase64             string // Owner's exact bytes when they are not UTF-8 (exact)
	Paused                  bool
}

// num formats n with thin spaces between thousands: 1 000 000.
func num(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteString("\u202f")
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// ago says how long before now t (a time.Time or *time.Time) was: "3.2s
// ago"; "" for a zero or nil t.
func ago(now time.Time, v any) string {
	var t time.Time
	switch x := v.(type) {
	case time.Time:
		t = x
	case *time.Time:
		if x != nil {
			t = *x
		}
	}
	if t.IsZero() {
		return ""
	}
	d := now.Sub(t)
	if d < 0 {
		return "in " + (-d).Round(time.Millisecond).String()
	}
	if d > 10*time.Second {
		d = d.Round(time.Second)
	} else {
		d = d.Round(time.Millisecond)
	}
	return d.String() + " ago"
}

// age says how long before now t was, to the 0.1s ("12.3s"); "?" for a
// zero t.
func age(now, t time.Time) string {
	if t.IsZero() {
		return "?"
	}
	return max(now.Sub(t), 0).Round(100 * time.Millisecond).String()
}

// query builds "?k=v&..." from pairs, leaving out empty values.
func query(kv ...string) template.URL {
	v := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] != "" {
			v.Set(kv[i], kv[i+1])
		}
	}
	return template.URL("?" + v.Encode())
}

// payloadView is a payload as the page shows it.
type payloadView struct {
	Kind string // "none", "text", "JSON" or "base64"
	Text string
	Size int
}

// viewPayload shows JSON pretty-printed, printable UTF-8 as text and
// anything else in base64.
func viewPayload(p []byte) payloadView {
	switch {
	case p == nil:
		return payloadView{Kind: "none"}
	case json.Valid(p):
		var b bytes.Buffer
		if json.Indent(&b, p, "", "  ") == nil {
			return payloadView{Kind: "JSON", Text: b.String(), Size: len(p)}
		}
	}
	if utf8.Valid(p) && strings.IndexFunc(string(p), func(r rune) bool { return !unicode.IsPrint(r) && !unicode.IsSpace(r) }) < 0 {
		return payloadView{Kind: "text", Text: string(p), Size: len(p)}
	}
	return payloadView{Kind: "base64", Text: base64.StdEncoding.EncodeToString(p), Size: len(p)}
}

// chart draws one rate of points as an inline SVG line chart: numbers and
// escaped text only.
func chart(points []ratePoint, which, label string) template.HTML {
	const w, h, pad = 320.0, 90.0, 4.0
	val := func(p ratePoint) float64 {
		switch which {
		case "expiries":
			return p.Expiries
		case "delivered":
			return p.Delivered
		}
		return p.Buried
	}
	top, last := 0.0, 0.0
	for _, p := range points {
		top = math.Max(top, val(p))
	}
	if len(points) > 0 {
		last = val(points[len(points)-1])
	}
	scale := top
	if scale == 0 {
		scale = 1
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<figure class="chart"><figcaption>%s <b>%.1f/s</b> <span class="muted">max %.1f/s</span></figcaption>`,
		template.HTMLEscapeString(label), last, top)
	fmt.Fprintf(&b, `<svg viewBox="0 0 %.0f %.0f" role="img" aria-label="%s per second, last five minutes">`, w, h, template.HTMLEscapeString(label))
	fmt.Fprintf(&b, `<line class="axis" x1="0" y1="%.1f" x2="%.0f" y2="%.1f"/>`, h-pad, w, h-pad)
	if len(points) > 1 {
		end := points[len(points)-1].At
		// The x axis spans the samples kept, at least a minute.
		span := math.Max(end.Sub(points[0].At).Seconds(), 60)
		b.WriteString(`<polyline class="line" points="`)
		for _, p := range points {
			x := w - end.Sub(p.At).Seconds()/span*w
			y := h - pad - val(p)/scale*(h-2*pad)
			fmt.Fprintf(&b, "%.1f,%.1f ", math.Max(x, 0), y)
		}
		b.WriteString(`"/>`)
	}
	b.WriteString(`</svg></figure>`)
	return template.HTML(b.String())
}

// page is what every page's template gets.
type page struct {
	Title        string
	Desc         string // the Redis
	Sets         []*webSet
	Set          *webSet
	AllowChanges bool
	CSRF         string
	Live         bool // refreshed by app.js
	Now          time.Time
	Flash        string
	Data         any
}

func (s *webServer) page(r *http.Request, title string, set *webSet, data any) page {
	return page{Title: title, Desc: s.desc, Sets: s.sets, Set: set, AllowChanges: s.allowChanges, CSRF: s.csrf,
		Now: time.Now(), Flash: r.URL.Query().Get("done"), Data: data}
}

func (s *webServer) render(w http.ResponseWriter, name string, p page) {
	var b bytes.Buffer
	if err := webTemplates.ExecuteTemplate(&b, name, p); err != nil {
		s.logf("render %s: %v", name, err)
		http.Error(w, "expset web: render "+name+": "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(b.Bytes())
}

// fail answers an error: 404 for what is not there, 400 for bad input, 502
// for Redis.
func (s *webServer) fail(w http.ResponseWriter, err error) {
	code := http.StatusBadGateway
	switch {
	case errors.Is(err, errNotFound), errors.Is(err, expset.ErrNotFound):
		code = http.StatusNotFound
	case errors.Is(err, errUsage), errors.Is(err, expset.ErrInvalidArgument):
		code = http.StatusBadRequest
	}
	if code == http.StatusBadGateway {
		s.logf("%v", err)
	}
	http.Error(w, "expset web: "+err.Error(), code)
}

// setOf returns the set the request names (?s=), among those shown.
func (s *webServer) setOf(r *http.Request) (*webSet, error) {
	name := r.URL.Query().Get("s")
	if r.Method == http.MethodPost {
		name = r.PostFormValue("s")
	}
	w := s.byName[name]
	if w == nil {
		return nil, fmt.Errorf("%w: set %q is not shown here", errNotFound, name)
	}
	return w, nil
}

// setSummary is one set's row on the index and its totals.
type setSummary struct {
	Set     *webSet
	Shards  []expset.ShardStats
	Total   statCounts
	Leased  int
	Stalled int    // shards with work due and no sweeper alive
	Warning string // what stalledWarning says of them ("" when none is)
	Now     time.Time
	Err     string
}

func (s *webServer) summary(ctx context.Context, w *webSet) setSummary {
	st, err := w.set.Stats(ctx)
	if err != nil {
		return setSummary{Set: w, Err: err.Error()}
	}
	rep := newStatsReport(w.name, w.cfg.Events, st)
	out := setSummary{Set: w, Shards: st, Total: rep.Total.statCounts, Leased: rep.Total.Leased, Stalled: rep.Total.Stalled, Now: rep.Now}
	if out.Stalled > 0 {
		out.Warning = stalledWarning(rep.Total, len(st))
	}
	return out
}

func (s *webServer) index(w http.ResponseWriter, r *http.Request) {
	var rows []setSummary
	for _, ws := range s.sets {
		rows = append(rows, s.summary(r.Context(), ws))
	}
	p := s.page(r, "sets", nil, rows)
	p.Live = true
	s.render(w, "index", p)
}

// overviewData is a set's page.
type overviewData struct {
	setSummary
	Groups  []groupRow
	Running int64 // handler calls running, over the groups
	Rates   []ratePoint
	Known   bool // the server counts the streams' entries (not miniredis)
	RErr    string
	Owners  []ownerDue

	OwnersPaused int64 // owners paused, over the groups

	Schedules     []expset.Schedule // the first webSchedulesShown, by ID
	MoreSchedules int64             // those not shown
}

func (s *webServer) overview(w http.ResponseWriter, r *http.Request) {
	ws, err := s.setOf(r)
	if err != nil {
		s.fail(w, err)
		return
	}
	d := overviewData{setSummary: s.summary(r.Context(), ws)}
	if d.Err != "" {
		s.fail(w, errors.New(d.Err))
		return
	}
	if d.Groups, _, err = ws.readGroups(r.Context(), true); err != nil {
		s.fail(w, err)
		return
	}
	for _, g := range d.Groups {
		d.Running += g.Running
		d.OwnersPaused += g.PausedOwners
	}
	var rerr error
	d.Rates, d.Known, rerr = ws.rates.series()
	if rerr != nil {
		d.RErr = rerr.Error()
	}
	if d.Owners, err = ws.nextOwners(r.Context(), webOwnersShown); err != nil {
		s.fail(w, err)
		return
	}
	if ws.cfg.Events {
		if d.Schedules, err = ws.set.Schedules(r.Context()); err != nil {
			s.fail(w, err)
			return
		}
		if n := len(d.Schedules); n > webSchedulesShown {
			d.Schedules, d.MoreSchedules = d.Schedules[:webSchedulesShown], int64(n-webSchedulesShown)
		}
	}
	p := s.page(r, ws.name, ws, d)
	p.Live = true
	s.render(w, "set", p)
}

func (s *webServer) owner(w http.ResponseWriter, r *http.Request) {
	ws, err := s.setOf(r)
	if err != nil {
		s.fail(w, err)
		return
	}
	q := r.URL.Query()
	o := q.Get("o")
	if o == "" || len(o) > maxOwnerLen {
		s.fail(w, fmt.Errorf("%w: owner of %d bytes: want 1 to %d", errUsage, len(o), maxOwnerLen))
		return
	}
	if store.IsJobOwner(o) {
		s.fail(w, fmt.Errorf("%w: that owner is kept for jobs and schedules, no one's: look a job up by its ID (expset job)", errUsage))
		return
	}
	at, err := strconv.Atoi(q.Get("at"))
	if q.Get("at") != "" && (err != nil || at < 0) {
		s.fail(w, fmt.Errorf("%w: at=%q: want an offset of 0 or more", errUsage, q.Get("at")))
		return
	}
	op, err := ws.readOwner(r.Context(), o, at)
	if err != nil {
		s.fail(w, err)
		return
	}
	s.render(w, "owner", s.page(r, ws.name+": "+o, ws, op))
}

// filterOf reads the dead-letter filter of a request's form.
func filterOf(r *http.Request, shards int) (deadFilter, error) {
	f := deadFilter{Group: r.FormValue("group"), Owner: r.FormValue("owner"), Job: r.FormValue("job"), Err: r.FormValue("err"), Shard: -1}
	for _, v := range []string{f.Group, f.Owner, f.Job, f.Err} {
		if len(v) > webMaxFilterText {
			return f, fmt.Errorf("%w: a filter of %d bytes: want at most %d", errUsage, len(v), webMaxFilterText)
		}
	}
	if sh := r.FormValue("shard"); sh != "" {
		n, err := strconv.Atoi(sh)
		if err != nil || n < 0 || n >= shards {
			return f, fmt.Errorf("%w: shard=%q: want 0 to %d", errUsage, sh, shards-1)
		}
		f.Shard = n
	}
	return f, nil
}

// Shard is the filter's shard for forms: "" for every shard.
func (f deadFilter) ShardText() string {
	if f.Shard < 0 {
		return ""
	}
	return strconv.Itoa(f.Shard)
}

// deadData is the dead letters' page.
type deadData struct {
	deadPage
	Filter deadFilter
	After  string
	Groups []groupRow
}

func (s *webServer) deadList(w http.ResponseWriter, r *http.Request) {
	ws, err := s.setOf(r)
	if err != nil {
		s.fail(w, err)
		return
	}
	f, err := filterOf(r, len(ws.dead))
	if err != nil {
		s.fail(w, err)
		return
	}
	from := cursor{Shard: max(f.Shard, 0)}
	after := r.FormValue("after")
	if after != "" {
		if from, err = parseRef(after, len(ws.dead), true); err != nil {
			s.fail(w, err)
			return
		}
	}
	dp, err := ws.readDead(r.Context(), f, from)
	if err != nil {
		s.fail(w, err)
		return
	}
	d := deadData{deadPage: dp, Filter: f, After: after}
	if d.Groups, _, err = ws.readGroups(r.Context(), false); err != nil {
		s.fail(w, err)
		return
	}
	s.render(w, "dead", s.page(r, ws.name+": dead letters", ws, d))
}

func (s *webServer) letter(w http.ResponseWriter, r *http.Request) {
	ws, err := s.setOf(r)
	if err != nil {
		s.fail(w, err)
		return
	}
	ref, err := parseRef(r.FormValue("ref"), len(ws.dead), false)
	if err != nil {
		s.fail(w, err)
		return
	}
	l, err := ws.readLetter(r.Context(), ref)
	if err != nil {
		s.fail(w, err)
		return
	}
	s.render(w, "letter", s.page(r, ws.name+": dead letter "+l.Ref(), ws, l))
}

// deadAct kicks or deletes dead letters: the selected ones (ref=SHARD/ID,
// repeated), or every one the filter selects (with confirm=yes). Only with
// --allow-changes, from this page (same origin) and with its CSRF token.
func (s *webServer) deadAct(w http.ResponseWriter, r *http.Request) {
	if !s.changeAllowed(w, r, "kick or delete dead letters") {
		return
	}
	ws, err := s.setOf(r)
	if err != nil {
		s.fail(w, err)
		return
	}
	f, err := filterOf(r, len(ws.dead))
	if err != nil {
		s.fail(w, err)
		return
	}
	do := r.PostFormValue("do")
	kick := strings.HasPrefix(do, "kick")
	verb := map[bool]string{true: "kicked", false: "deleted"}[kick]
	var n int
	var what string
	switch do {
	case "kick", "delete":
		var refs []cursor
		for _, v := range r.PostForm["ref"] {
			c, err := parseRef(v, len(ws.dead), false)
			if err != nil {
				s.fail(w, err)
				return
			}
			refs = append(refs, c)
		}
		if len(refs) == 0 {
			s.fail(w, fmt.Errorf("%w: no dead letter selected: tick the ones to %s", errUsage, do))
			return
		}
		what = fmt.Sprintf("%d selected", len(refs))
		n, err = ws.act(r.Context(), kick, refs)
	case "kick-matching", "delete-matching":
		if r.PostFormValue("confirm") != "yes" {
			s.fail(w, fmt.Errorf("%w: tick the box that confirms acting on every matching dead letter", errUsage))
			return
		}
		what = fmt.Sprintf("all matching group=%q owner=%q job=%q error~%q shard=%s", f.Group, f.Owner, f.Job, f.Err, f.ShardText())
		n, err = ws.actMatching(r.Context(), kick, f)
	default:
		s.fail(w, fmt.Errorf("%w: do=%q: want kick, delete, kick-matching or delete-matching", errUsage, do))
		return
	}
	ws.counts.clear()
	s.logf("%s %s %d dead letter(s) of set %s (%s)", r.RemoteAddr, verb, n, ws.name, what)
	if err != nil {
		s.fail(w, fmt.Errorf("after %d %s: %w", n, verb, err))
		return
	}
	back := query("s", ws.name, "group", f.Group, "owner", f.Owner, "job", f.Job, "err", f.Err, "shard", f.ShardText(),
		"done", fmt.Sprintf("%s %d dead letter(s)", verb, n))
	http.Redirect(w, r, "/dead"+string(back), http.StatusSeeOther)
}

// changeAllowed reads the form of a change (a POST) and reports whether it
// may be made: only with --allow-changes, from this page (same origin) and
// with its CSRF token. Otherwise it answers the request, logs the refusal,
// and returns false; what says what --allow-changes allows.
func (s *webServer) changeAllowed(w http.ResponseWriter, r *http.Request, what string) bool {
	r.Body = http.MaxBytesReader(w, r.Body, 4<<20)
	if !s.allowChanges {
		s.logf("%s refused: read-only (POST %s)", r.RemoteAddr, r.URL.Path)
		http.Error(w, "expset web: read-only: start expset web with --allow-changes to "+what, http.StatusForbidden)
		return false
	}
	if err := sameOrigin(r); err != nil {
		s.logf("%s refused: not from this page: %v", r.RemoteAddr, err)
		http.Error(w, "expset web: refused: the request does not come from this page ("+err.Error()+")", http.StatusForbidden)
		return false
	}
	if err := r.ParseForm(); err != nil {
		s.fail(w, fmt.Errorf("%w: %v", errUsage, err))
		return false
	}
	if subtle.ConstantTimeCompare([]byte(r.PostFormValue("csrf")), []byte(s.csrf)) != 1 {
		s.logf("%s refused: no valid CSRF token", r.RemoteAddr)
		http.Error(w, "expset web: refused: the form's CSRF token is missing or stale: reload the page", http.StatusForbidden)
		return false
	}
	return true
}

// groupAct pauses or resumes a consumer group, or one owner in it
// (do=pause or do=resume, group=NAME, and owner=OWNER, or owner_base64
// for an owner that is not UTF-8; neither for the whole group), through
// the library, with the guards of every change (changeAllowed), and goes
// back to the set's page saying what it changed (pauseText, as the
// command says it).
func (s *webServer) groupAct(w http.ResponseWriter, r *http.Request) {
	if !s.changeAllowed(w, r, "pause or resume consumer groups and their owners") {
		return
	}
	ws, err := s.setOf(r)
	if err != nil {
		s.fail(w, err)
		return
	}
	group, owner, do := r.PostFormValue("group"), r.PostFormValue("owner"), r.PostFormValue("do")
	if b := r.PostFormValue("owner_base64"); b != "" {
		raw, err := base64.StdEncoding.DecodeString(b)
		if err != nil {
			s.fail(w, fmt.Errorf("%w: owner_base64: %v", errUsage, err))
			return
		}
		owner = string(raw)
	}
	var changed bool
	switch do {
	case "pause":
		changed, err = ws.set.Pause(r.Context(), group, owner)
	case "resume":
		changed, err = ws.set.Resume(r.Context(), group, owner)
	default:
		s.fail(w, fmt.Errorf("%w: do=%q: want pause or resume", errUsage, do))
		return
	}
	if err != nil {
		s.fail(w, err)
		return
	}
	done := pauseText(do == "pause", changed, group, owner, ws.set)
	s.logf("%s %s of set %s", r.RemoteAddr, done, ws.name)
	http.Redirect(w, r, "/set"+string(query("s", ws.name, "done", done)), http.StatusSeeOther)
}
