package beanstalk

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

func TestReadTimeout(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"5", 5, true}, {" 5", 5, true}, {"5 x", 5, true}, {"x", 0, true}, {"", 0, true},
		{"-1", -1, true}, {"4294967296", 0, true}, {"4294967301", 5, true}, {"2147483648", -1, true},
		{"9223372036854775807", -1, true}, {"9223372036854775808", 0, false}, {"-9223372036854775808", 0, true},
		{"99999999999999999999", 0, false},
	} {
		got, ok := readTimeout(c.in)
		if got != c.want || ok != c.ok {
			t.Errorf("readTimeout(%q) = %d, %v; want %d, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

func TestReadKickBound(t *testing.T) {
	for _, c := range []struct {
		in   string
		want uint32
		ok   bool
	}{
		{"5", 5, true}, {"+3", 3, true}, {"-1", 1<<32 - 1, true}, {"4294967296", 0, true},
		{"18446744073709551615", 1<<32 - 1, true}, {"18446744073709551616", 0, false}, {"x", 0, false}, {"", 0, false},
	} {
		got, ok := readKickBound(c.in)
		if got != c.want || ok != c.ok {
			t.Errorf("readKickBound(%q) = %d, %v; want %d, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

func TestReadUint(t *testing.T) {
	for _, c := range []struct {
		in   string
		bits uint
		want uint64
		rest string
		ok   bool
	}{
		{"  12 x", 32, 12, " x", true}, {"4294967295", 32, 1<<32 - 1, "", true}, {"4294967296", 32, 0, "", false},
		{"18446744073709551615", 64, 1<<64 - 1, "", true}, {"18446744073709551616", 64, 0, "", false},
		{"+1", 32, 0, "+1", false}, {"", 32, 0, "", false},
	} {
		got, rest, ok := readUint(c.in, c.bits)
		if got != c.want || rest != c.rest || ok != c.ok {
			t.Errorf("readUint(%q, %d) = %d, %q, %v; want %d, %q, %v", c.in, c.bits, got, rest, ok, c.want, c.rest, c.ok)
		}
	}
}

// FuzzCommandLine: no command line makes the parsers panic.
func FuzzCommandLine(f *testing.F) {
	for _, s := range []string{"put 1 2 3 4", "pause-tube x 5", "kick -1", "reserve-with-timeout 9", "use a", "release 1 2 3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		cmd := parseLine(line)
		if v, rest, ok := readUint(cmd.rest, 32); ok && (v > 1<<32-1 || len(rest) > len(cmd.rest)) {
			t.Fatalf("readUint(%q) = %d, %q", cmd.rest, v, rest)
		}
		_, _ = readUintAll(cmd.rest, 64)
		_, _ = readKickBound(cmd.rest)
		if v, ok := readTimeout(cmd.rest); ok && v < -1 {
			t.Fatalf("readTimeout(%q) = %d", cmd.rest, v)
		}
		if name, _, ok := readPauseArgs(cmd.rest); ok && !validTube(name) {
			t.Fatalf("readPauseArgs(%q) gave the name %q", cmd.rest, name)
		}
	})
}

// FuzzConnInput: no input makes a front panic, and each connection gets
// its answers and ends when the client closes its side.
func FuzzConnInput(f *testing.F) {
	for _, s := range []string{
		"put 1 0 1 1\r\nx\r\nreserve\r\ndelete 1\r\n",
		"put 0 0 0 3\r\nab\r\n\r\nkick -1\r\nstats\r\n",
		"use t\r\nwatch t\r\nignore default\r\nreserve-with-timeout -1\r\n",
		"pause-tube default 0\r\nstats-tube default\r\nlist-tubes\r\n",
		"put 1 0 1 70000\r\n",
	} {
		f.Add([]byte(s))
	}
	mr := miniredis.RunT(f)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	f.Cleanup(func() { rdb.Close() })
	addr := startFront(f, rdb, "fuzz", Config{MaxJobSize: 1024})
	f.Fuzz(func(t *testing.T, in []byte) {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		go func() {
			_, _ = nc.Write(in)
			_ = nc.(*net.TCPConn).CloseWrite()
		}()
		_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.Copy(io.Discard, nc); err != nil {
			t.Fatalf("the front did not end the connection: %v", err)
		}
	})
}
