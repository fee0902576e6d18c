package expsetotel_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/expset/expset"
	"github.com/expset/expset/expsetotel"
)

// TestJoin: Join chains every field of expset.Hooks (a field added to the
// core fails here until Join chains it), calling the hooks in the order
// given, and leaves nil the fields no hook sets.
func TestJoin(t *testing.T) {
	fields := reflect.TypeOf(expset.Hooks{})
	for i := 0; i < fields.NumField(); i++ {
		f := fields.Field(i)
		t.Run(f.Name, func(t *testing.T) {
			if f.Type.Kind() != reflect.Func {
				t.Fatalf("expset.Hooks.%s is a %s: Join knows only hooks", f.Name, f.Type)
			}
			var order []string
			only := func(tag string) expset.Hooks {
				var h expset.Hooks
				reflect.ValueOf(&h).Elem().Field(i).Set(reflect.MakeFunc(f.Type, func([]reflect.Value) []reflect.Value {
					order = append(order, tag)
					return nil
				}))
				return h
			}
			j := reflect.ValueOf(expsetotel.Join(only("a"), expset.Hooks{}, only("b"), only("c")))
			for k := 0; k < fields.NumField(); k++ {
				if got := j.Field(k); k != i && !got.IsNil() {
					t.Errorf("%s is set, but no joined hook sets it", fields.Field(k).Name)
				}
			}
			if j.Field(i).IsNil() {
				t.Fatalf("%s is nil after Join", f.Name)
			}
			args := make([]reflect.Value, f.Type.NumIn())
			for k := range args {
				args[k] = reflect.Zero(f.Type.In(k))
			}
			j.Field(i).Call(args)
			if got := strings.Join(order, ","); got != "a,b,c" {
				t.Errorf("%s called the hooks %q, want a,b,c", f.Name, got)
			}
		})
	}
	if !reflect.ValueOf(expsetotel.Join()).IsZero() || !reflect.ValueOf(expsetotel.Join(expset.Hooks{}, expset.Hooks{})).IsZero() {
		t.Error("Join of no hooks set is not the zero Hooks")
	}
}
