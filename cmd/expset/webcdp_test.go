package main

import (
	"bufio"
	"crypto/rand"
	"encoding/base64"
	wsbin "encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A headless Chromium driven over the DevTools protocol, on the standard
// library: a websocket client of a few dozen lines, one call at a time.

// browser is a headless Chromium with one page.
type browser struct {
	t    *testing.T
	conn net.Conn
	r    *bufio.Reader
	next int
}

// startBrowser starts Debian's chromium (or skips t with a line that says
// how to install it, unless EXPSET_REQUIRE_BROWSER=1) and connects to its
// page. It is stopped when t ends.
func startBrowser(t *testing.T) *browser {
	t.Helper()
	bin, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("EXPSET_REQUIRE_BROWSER") == "1" {
			t.Fatalf("no chromium in PATH and EXPSET_REQUIRE_BROWSER=1: apt-get install chromium")
		}
		t.Skip("no chromium in PATH: apt-get install chromium to run the browser tests (EXPSET_REQUIRE_BROWSER=1 makes this a failure)")
	}
	dir := t.TempDir()
	cmd := exec.Command(bin, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
		"--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
		"--user-data-dir="+dir, "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
		"--window-size=1280,1000", "--hide-scrollbars", "about:blank")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // its helpers stop with it
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	// Chromium writes its port and browser path to DevToolsActivePort.
	var port string
	waitFor(t, "DevToolsActivePort from chromium", func() bool {
		b, err := os.ReadFile(filepath.Join(dir, "DevToolsActivePort"))
		port, _, _ = strings.Cut(string(b), "\n")
		return err == nil && port != ""
	})
	var targets []struct{ Type, WebSocketDebuggerURL string }
	waitFor(t, "a page target in chromium", func() bool {
		res, err := http.Get("http://127.0.0.1:" + port + "/json/list")
		if err != nil {
			return false
		}
		defer res.Body.Close()
		targets = nil
		if json.NewDecoder(res.Body).Decode(&targets) != nil {
			return false
		}
		for _, tg := range targets {
			if tg.Type == "page" {
				return true
			}
		}
		return false
	})
	for _, tg := range targets {
		if tg.Type == "page" {
			b, err := dialWebsocket(tg.WebSocketDebuggerURL)
			if err != nil {
				t.Fatalf("connect to chromium's page: %v\n%s", err, stderr.String())
			}
			b.t = t
			t.Cleanup(func() { b.conn.Close() })
			return b
		}
	}
	panic("unreachable")
}

func dialWebsocket(raw string) (*browser, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, err
	}
	c, err := net.Dial("tcp", u.Host)
	if err != nil {
		return nil, err
	}
	key := make([]byte, 16)
	_, _ = rand.Read(key)
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n",
		u.RequestURI(), u.Host, base64.StdEncoding.EncodeToString(key))
	r := bufio.NewReader(c)
	res, err := http.ReadResponse(r, nil)
	if err != nil {
		c.Close()
		return nil, err
	}
	if res.StatusCode != http.StatusSwitchingProtocols {
		c.Close()
		return nil, fmt.Errorf("websocket handshake: %s", res.Status)
	}
	return &browser{conn: c, r: r}, nil
}

// send writes one masked text frame.
func (b *browser) send(p []byte) error {
	hdr := []byte{0x81}
	switch n := len(p); {
	case n < 126:
		hdr = append(hdr, 0x80|byte(n))
	case n < 1<<16:
		hdr = append(hdr, 0x80|126, byte(n>>8), byte(n))
	default:
		hdr = append(hdr, 0x80|127)
		hdr = wsbin.BigEndian.AppendUint64(hdr, uint64(n))
	}
	mask := make([]byte, 4)
	_, _ = rand.Read(mask)
	hdr = append(hdr, mask...)
	out := make([]byte, len(p))
	for i := range p {
		out[i] = p[i] ^ mask[i%4]
	}
	_, err := b.conn.Write(append(hdr, out...))
	return err
}

// recv reads one message (joining continuation frames; pings ignored).
func (b *browser) recv() ([]byte, error) {
	var msg []byte
	for {
		h := make([]byte, 2)
		if _, err := io.ReadFull(b.r, h); err != nil {
			return nil, err
		}
		fin, op, n := h[0]&0x80 != 0, h[0]&0x0f, uint64(h[1]&0x7f)
		switch n {
		case 126:
			x := make([]byte, 2)
			if _, err := io.ReadFull(b.r, x); err != nil {
				return nil, err
			}
			n = uint64(wsbin.BigEndian.Uint16(x))
		case 127:
			x := make([]byte, 8)
			if _, err := io.ReadFull(b.r, x); err != nil {
				return nil, err
			}
			n = wsbin.BigEndian.Uint64(x)
		}
		p := make([]byte, n)
		if _, err := io.ReadFull(b.r, p); err != nil {
			return nil, err
		}
		switch op {
		case 8:
			return nil, errors.New("websocket closed by chromium")
		case 9, 10:
			continue
		}
		msg = append(msg, p...)
		if fin {
			return msg, nil
		}
	}
}

// call sends a DevTools command and returns its result, skipping events.
func (b *browser) call(method string, params any) json.RawMessage {
	b.t.Helper()
	b.next++
	id := b.next
	req, _ := json.Marshal(map[string]any{"id": id, "method": method, "params": params})
	_ = b.conn.SetDeadline(time.Now().Add(wait))
	if err := b.send(req); err != nil {
		b.t.Fatalf("%s: %v", method, err)
	}
	for {
		m, err := b.recv()
		if err != nil {
			b.t.Fatalf("%s: %v", method, err)
		}
		var res struct {
			ID     int
			Result json.RawMessage
			Error  *struct{ Message string }
		}
		if json.Unmarshal(m, &res) != nil || res.ID != id {
			continue
		}
		if res.Error != nil {
			b.t.Fatalf("%s: %s", method, res.Error.Message)
		}
		return res.Result
	}
}

// eval evaluates expr in the page (awaiting a promise) into v.
func (b *browser) eval(expr string, v any) {
	b.t.Helper()
	raw := b.call("Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true, "awaitPromise": true})
	var res struct {
		Result           struct{ Value json.RawMessage }
		ExceptionDetails *struct {
			Text      string
			Exception struct{ Description string }
		}
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		b.t.Fatalf("eval %s: %v", expr, err)
	}
	if e := res.ExceptionDetails; e != nil {
		b.t.Fatalf("eval %s: %s %s", expr, e.Text, e.Exception.Description)
	}
	if v != nil {
		if err := json.Unmarshal(res.Result.Value, v); err != nil {
			b.t.Fatalf("eval %s = %s: %v", expr, res.Result.Value, err)
		}
	}
}

// text returns the text of the first element sel selects ("" when none).
func (b *browser) text(sel string) string {
	b.t.Helper()
	var s string
	b.eval(fmt.Sprintf(`(document.querySelector(%q) || {textContent: ""}).textContent.trim()`, sel), &s)
	return s
}

// open loads u and waits until it has loaded.
func (b *browser) open(u string) {
	b.t.Helper()
	b.call("Page.navigate", map[string]any{"url": u})
	b.waitLoaded(func(href string) bool { return href == u })
}

// waitLoaded waits until the page's address satisfies at and it has loaded.
func (b *browser) waitLoaded(at func(href string) bool) {
	b.t.Helper()
	waitFor(b.t, "a loaded page", func() bool {
		var st struct{ Href, State string }
		b.eval(`({href: location.href, state: document.readyState})`, &st)
		return at(st.Href) && st.State == "complete"
	})
}
