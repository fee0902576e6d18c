package expset

import (
	"fmt"
	"time"
)

// optionErr records the first invalid option given to a constructor that
// cannot return an error itself (NewSweeper) or reports it later (Consume).
type optionErr struct {
	err error
}

// ok records err, when it is the first, and reports whether err is nil.
func (o *optionErr) ok(err error) bool {
	if err != nil && o.err == nil {
		o.err = err
	}
	return err == nil
}

// inRange returns an ErrInvalidOption error naming opt when v is outside
// lo..hi.
func inRange[T int | time.Duration](opt string, v, lo, hi T) error {
	if v < lo || v > hi {
		return fmt.Errorf("%w: %s(%v): want %v to %v", ErrInvalidOption, opt, v, lo, hi)
	}
	return nil
}

// applyOptions applies opts to cfg in order, skipping nil ones.
func applyOptions[C any, O ~func(*C)](cfg *C, opts []O) {
	for _, o := range opts {
		if o != nil {
			o(cfg)
		}
	}
}
