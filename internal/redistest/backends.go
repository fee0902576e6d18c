package redistest

import (
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// EachBackend runs fn as three subtests, each with a client of its own: on
// miniredis ("miniredis"), on the shared real server ("redis", see Client)
// and on the shared three-master cluster ("cluster", see SharedCluster). The
// sub-modules' tests use it; the root package's eachBackend adds what its
// tests need of each backend.
func EachBackend(t *testing.T, fn func(t *testing.T, rdb redis.UniversalClient)) {
	t.Run("miniredis", func(t *testing.T) {
		mr := miniredis.RunT(t)
		c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
		t.Cleanup(func() { _ = c.Close() })
		fn(t, c)
	})
	t.Run("redis", func(t *testing.T) { fn(t, Client(t)) })
	t.Run("cluster", func(t *testing.T) { fn(t, SharedCluster(t).Client(t)) })
}
