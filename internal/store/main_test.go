package store

import (
	"testing"

	"github.com/expset/expset/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }
