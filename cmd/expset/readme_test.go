package main

import (
	"io"
	"os"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// TestReadmeNamesEveryFlag: README.md names every command and every flag
// the commands take, so the two cannot drift apart.
func TestReadmeNamesEveryFlag(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	a := &app{stdout: io.Discard, stderr: io.Discard}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if !c.IsAvailableCommand() && c.HasParent() {
			return
		}
		if c.HasParent() && !strings.Contains(readme, c.CommandPath()) {
			t.Errorf("README.md does not name the command %q", c.CommandPath())
		}
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if f.Name != "help" && f.Name != "version" && !strings.Contains(readme, "--"+f.Name) {
				t.Errorf("README.md does not name %s's flag --%s", c.CommandPath(), f.Name)
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(a.rootCmd())
}
