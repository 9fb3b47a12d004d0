package envelope

import (
	"errors"
	"fmt"
	"strings"
)

// ErrOtherMajor is what Readable returns for an envelope written in a format
// of another major version than Version.
var ErrOtherMajor = errors.New("envelope format of another major version")

// Readable reports whether this relay reads an envelope whose
// meta.mcp_version is v. A minor or patch version only adds optional fields,
// which Parse keeps in Extra or passes over, so every version of Version's
// major is read, as is an envelope without a version. Another major is a
// breaking change: its fields may not mean what this relay takes them to
// mean, so the error wraps ErrOtherMajor and names both versions.
func Readable(v string) error {
	if v == "" || majorOf(v) == majorOf(Version) {
		return nil
	}
	return fmt.Errorf("%w: meta.mcp_version is %q, this relay reads %s.x", ErrOtherMajor, v, majorOf(Version))
}

// majorOf is the part of a semantic version before its first dot.
func majorOf(v string) string {
	major, _, _ := strings.Cut(v, ".")
	return major
}
