package expset

import (
	"context"
	"time"
)

// loop is the shape of the background loops (Sweeper.Run, Set.Consume): it
// calls round at once, then again each time the wait round returned has
// passed, until ctx ends (it returns nil) or round fails (it returns the
// error). It starts no goroutine.
func loop(ctx context.Context, round func() (time.Duration, error)) error {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		}
		wait, err := round()
		if err != nil {
			return err
		}
		timer.Reset(wait)
	}
}
