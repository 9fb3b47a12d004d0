package cli

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// ProtectProcess makes the relay's process non-dumpable, so that processes of
// the same user (a stdio MCP server the relay started, for one) can neither
// read its /proc/<pid>/environ, where the secret settings sit in the initial
// environment block, nor its memory through /proc/<pid>/mem or ptrace. Call it
// first in main, before any setting is read or any child is started.
func ProtectProcess() error {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("make the process non-dumpable: %w", err)
	}
	return nil
}
