package expset

import (
	"context"
	"fmt"
	"strconv"

	"github.com/expset/expset/internal/store"
	"github.com/redis/go-redis/v9"
)

// The configuration a set's first Open records in Redis (its meta hash):
// ReadConfiguration, and how Open and the errors render it.

// Configuration is what the first Open of a set recorded in Redis, in the
// hash expset:{name}:meta (HGETALL shows it: version 1, shards, and events,
// payloads and index as 0 or 1).
type Configuration struct {
	Shards   int
	Events   bool
	Payloads bool
	Index    bool // the due index is kept (always with Events)
}

// ReadConfiguration returns the configuration recorded for the set called
// name, or an error matching ErrNotFound when no set of that name was opened.
func ReadConfiguration(ctx context.Context, rdb redis.UniversalClient, name string) (Configuration, error) {
	if err := checkClient(rdb); err != nil {
		return Configuration{}, err
	}
	if err := validateName(name); err != nil {
		return Configuration{}, err
	}
	c, found, err := store.ReadConfig(ctx, rdb, name)
	if err != nil {
		return Configuration{}, err
	}
	if !found {
		return Configuration{}, fmt.Errorf("%w: no set %q (%s is missing)", ErrNotFound, name, store.MetaKey(name))
	}
	return Configuration(c), nil
}

// text describes c in errors.
func (c Configuration) text() string {
	return fmt.Sprintf("shards=%d events=%t payloads=%t index=%t", c.Shards, c.Events, c.Payloads, c.Index)
}

// optionsText renders Options as Go source: "WithShards(16),
// WithExpiryEvents()".
func (c Configuration) optionsText() string {
	out := "WithShards(" + strconv.Itoa(c.Shards) + ")"
	if c.Events {
		out += ", WithExpiryEvents()"
	}
	if c.Payloads {
		out += ", WithPayloadStorage()"
	}
	if c.Index && !c.Events {
		out += ", WithSweepIndex()"
	}
	return out
}

// recordedOptions returns the options that open a set with this
// configuration (WithRecordedConfiguration).
func (c Configuration) recordedOptions() []OpenOption {
	opts := []OpenOption{WithShards(c.Shards)}
	if c.Events {
		opts = append(opts, WithExpiryEvents())
	}
	if c.Payloads {
		opts = append(opts, WithPayloadStorage())
	}
	if c.Index && !c.Events {
		opts = append(opts, WithSweepIndex())
	}
	return opts
}
