//go:build !linux

package cli

// ProtectProcess does nothing outside Linux (docs/security.md).
func ProtectProcess() error { return nil }
