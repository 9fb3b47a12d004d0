package bundle

import (
	"fmt"
	"regexp"
	"strings"
	"unicode"

	"golang.org/x/text/unicode/norm"

	"github.com/relaystation/relay/tools/mcpconfig"
)

// Sep joins a bundle's id and its server's own name into the server's name
// in mcp.json: "<id>__<server>". Server names may only hold letters, digits,
// '-' and '_' (capabilities are "<server>.<tool>", LLM function names
// "<server>__<tool>"), so the separator is a double underscore, which a
// bundle id may not contain: the name splits at its first "__".
const Sep = "__"

// MaxIDLen bounds a bundle id.
const MaxIDLen = 40

var idRE = regexp.MustCompile(`^[A-Za-z0-9](?:[A-Za-z0-9_-]*[A-Za-z0-9])?$`)

var serverNameRE = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// CheckID reports why id is not a valid bundle id: letters, digits, '-' and
// '_' (no "__"), starting and ending with a letter or digit, at most
// MaxIDLen characters.
func CheckID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("bundle id is empty")
	case len(id) > MaxIDLen:
		return fmt.Errorf("bundle id %q is %d characters long, at most %d allowed", id, len(id), MaxIDLen)
	case !idRE.MatchString(id) || strings.Contains(id, Sep):
		return fmt.Errorf("bundle id %q: want letters, digits, '-' and '_' (no %q), starting and ending with a letter or digit", id, Sep)
	}
	return nil
}

// ServerName is the name a bundle's server gets in mcp.json.
func ServerName(id, server string) (string, error) {
	if !serverNameRE.MatchString(server) {
		return "", fmt.Errorf("bundle %s: server name %q: want letters, digits, '-' or '_'", id, server)
	}
	name := id + Sep + server
	if len(name) > mcpconfig.MaxNameLen {
		return "", fmt.Errorf("bundle %s: server name %q is %d characters long, at most %d allowed", id, name, len(name), mcpconfig.MaxNameLen)
	}
	return name, nil
}

// SplitName splits a server name made by ServerName into the bundle id and
// the server's own name; ok is false for other names.
func SplitName(name string) (id, server string, ok bool) {
	id, server, ok = strings.Cut(name, Sep)
	return id, server, ok && CheckID(id) == nil && server != ""
}

// fold spells letters that lose no mark under NFD in ASCII.
var fold = map[rune]string{'ß': "ss", 'æ': "ae", 'Æ': "AE", 'ø': "o", 'Ø': "O", 'œ': "oe", 'Œ': "OE",
	'ł': "l", 'Ł': "L", 'đ': "d", 'Đ': "D", 'þ': "th", 'Þ': "TH", 'ð': "d", 'Ð': "D", 'ı': "i"}

// sanitizeID turns a free-form name (an MCP Bundle's "name") into a bundle
// id: accented letters lose their marks ("Ünïcode" is "Unicode"), other
// letters and digits outside ASCII are spelt "u<hex>" so that every name
// with letters gets a stable id, and runs of other characters become '-'.
func sanitizeID(name string) string {
	var b strings.Builder
	dash := false
	for _, r := range norm.NFD.String(name) {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
		switch {
		case unicode.Is(unicode.Mn, r):
			continue
		case ok:
			b.WriteRune(r)
			dash = false
			continue
		case fold[r] != "":
			b.WriteString(fold[r])
			dash = false
			continue
		case unicode.IsLetter(r) || unicode.IsDigit(r):
			fmt.Fprintf(&b, "u%x", r)
			dash = false
			continue
		}
		if !dash && b.Len() > 0 {
			b.WriteByte('-')
			dash = true
		}
	}
	id := strings.TrimRight(b.String(), "-")
	if len(id) > MaxIDLen {
		id = strings.TrimRight(id[:MaxIDLen], "-")
	}
	return id
}
