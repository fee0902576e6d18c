package redistest

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// fakeBinaries creates empty executable files called names in a new directory.
func fakeBinaries(t *testing.T, names ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestBinariesFromEnvironment(t *testing.T) {
	redisDir := fakeBinaries(t, "redis-server", "redis-cli", "valkey-server", "valkey-cli")
	valkeyDir := fakeBinaries(t, "valkey-server", "valkey-cli")
	noCLI := fakeBinaries(t, "redis-server")
	for _, tc := range []struct {
		name, env           string
		wantServer, wantCLI string
	}{
		{"redis directory", redisDir, filepath.Join(redisDir, "redis-server"), filepath.Join(redisDir, "redis-cli")},
		{"valkey directory", valkeyDir, filepath.Join(valkeyDir, "valkey-server"), filepath.Join(valkeyDir, "valkey-cli")},
		{"server path", filepath.Join(valkeyDir, "valkey-server"), filepath.Join(valkeyDir, "valkey-server"), filepath.Join(valkeyDir, "valkey-cli")},
		{"no CLI", noCLI, filepath.Join(noCLI, "redis-server"), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("EXPSET_REDIS_BIN", tc.env)
			server, cli, err := binaries("EXPSET_REDIS_BIN")
			if err != nil || server != tc.wantServer || cli != tc.wantCLI {
				t.Fatalf("binaries = %q, %q, %v; want %q, %q", server, cli, err, tc.wantServer, tc.wantCLI)
			}
			if b, err := Binary(); err != nil || b != tc.wantServer {
				t.Fatalf("Binary = %q, %v; want %q", b, err, tc.wantServer)
			}
			c, err := CLI()
			if tc.wantCLI == "" {
				if err == nil || !strings.Contains(err.Error(), "EXPSET_REDIS_BIN="+tc.env) {
					t.Fatalf("CLI without a CLI = %q, %v; want an error naming EXPSET_REDIS_BIN", c, err)
				}
			} else if err != nil || c != tc.wantCLI {
				t.Fatalf("CLI = %q, %v; want %q", c, err, tc.wantCLI)
			}
		})
	}
}

func TestBinariesMissing(t *testing.T) {
	empty := t.TempDir()
	for _, env := range []string{empty, filepath.Join(empty, "nothing-here")} {
		t.Setenv("EXPSET_REDIS_BIN", env)
		if _, err := Binary(); err == nil || !strings.Contains(err.Error(), "EXPSET_REDIS_BIN="+env) {
			t.Errorf("EXPSET_REDIS_BIN=%s: Binary err = %v; want one naming the variable", env, err)
		}
	}
	t.Setenv("EXPSET_REDIS_BIN", "")
	t.Setenv("PATH", empty)
	if _, err := Binary(); err == nil || !strings.Contains(err.Error(), "PATH") {
		t.Errorf("empty PATH: Binary err = %v; want one naming PATH", err)
	}
	t.Setenv("EXPSET_OLD_REDIS_BIN", "")
	if _, err := OldBinary(); err == nil || !strings.Contains(err.Error(), ".ci/servers redis-6.2.16") {
		t.Errorf("OldBinary err = %v; want one saying how to build an old server", err)
	}
}

// TestStartsTheConfiguredServer checks that Start runs the server the
// environment names, whichever project built it.
func TestStartsTheConfiguredServer(t *testing.T) {
	s := Start(t)
	bin, err := Binary()
	if err != nil {
		t.Fatal(err)
	}
	if s.bin != bin {
		t.Fatalf("Start ran %s; Binary is %s", s.bin, bin)
	}
	info, err := Info(t.Context(), s.Client(t), "server")
	if err != nil {
		t.Fatal(err)
	}
	if info["redis_version"] == "" || info["tcp_port"] != strconv.Itoa(s.Port) {
		t.Fatalf("INFO server of %s: redis_version %q, tcp_port %q", s.Addr, info["redis_version"], info["tcp_port"])
	}
	t.Logf("%s: redis_version %s, valkey_version %q", bin, info["redis_version"], info["valkey_version"])
}
