package expset

import (
	"context"
	"fmt"
	"strconv"

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
	key := metaKey(name)
	fields, err := rdb.HGetAll(ctx, key).Result()
	if err != nil {
		return Configuration{}, fmt.Errorf("expset: read %s: %w", key, err)
	}
	if len(fields) == 0 {
		return Configuration{}, fmt.Errorf("%w: no set %q (%s is missing)", ErrNotFound, name, key)
	}
	return configurationFields(key, fields)
}

// metaVersion is the version of the key layout the meta hash records.
const metaVersion = "1"

// fields returns c as the field-value pairs of its meta hash.
func (c Configuration) fields() []any {
	b := func(v bool) string {
		if v {
			return "1"
		}
		return "0"
	}
	return []any{"version", metaVersion, "shards", strconv.Itoa(c.Shards), "events", b(c.Events), "payloads", b(c.Payloads), "index", b(c.Index)}
}

// text describes c in errors.
func (c Configuration) text() string {
	return fmt.Sprintf("shards=%d events=%t payloads=%t index=%t", c.Shards, c.Events, c.Payloads, c.Index)
}

// recordedConfiguration reads the reply of open.lua: the fields of the meta
// hash.
func recordedConfiguration(key string, v any) (Configuration, error) {
	xs, ok := v.([]any)
	if !ok || len(xs)%2 != 0 {
		return Configuration{}, fmt.Errorf("%w: open.lua on %s answered %v", errUnexpectedReply, key, v)
	}
	fields := make(map[string]string, len(xs)/2)
	for i := 0; i < len(xs); i += 2 {
		k, ok1 := xs[i].(string)
		val, ok2 := xs[i+1].(string)
		if !ok1 || !ok2 {
			return Configuration{}, fmt.Errorf("%w: open.lua on %s answered %v", errUnexpectedReply, key, v)
		}
		fields[k] = val
	}
	return configurationFields(key, fields)
}

// configurationFields reads the fields of a meta hash: exactly those that
// Configuration.fields writes, with values it could have written.
func configurationFields(key string, fields map[string]string) (Configuration, error) {
	var c Configuration
	n, err := strconv.Atoi(fields["shards"])
	c.Shards = n
	ok := fields["version"] == metaVersion && err == nil && n >= 1 && n <= maxShards && len(fields) == 5
	for name, dst := range map[string]*bool{"events": &c.Events, "payloads": &c.Payloads, "index": &c.Index} {
		v := fields[name]
		ok = ok && (v == "0" || v == "1")
		*dst = v == "1"
	}
	if !ok {
		return Configuration{}, fmt.Errorf("%w: %s holds %v, not a configuration of version %s", errUnexpectedReply, key, fields, metaVersion)
	}
	return c, nil
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
