package envelope

import (
	"fmt"
)

// Check applies the schema's rules to e directly, without encoding it: the
// fast path Publish takes for envelopes built in Go. It accepts exactly the
// envelopes whose JSON form Validate accepts (FuzzCheckMatchesSchema keeps the
// two in step); raw bytes from outside always go through ValidateJSON.
func Check(e *Envelope) error {
	if e == nil {
		return &ValidationError{Field: "/", Reason: "nil envelope"}
	}
	if !isUUIDv4(e.ID) {
		if e.ID == "" {
			return &ValidationError{Field: "/id", Reason: "missing property 'id'"}
		}
		return &ValidationError{Field: "/id", Reason: fmt.Sprintf("%q is not a UUID v4", e.ID)}
	}
	if y := e.Timestamp.Year(); y < 0 || y > 9999 {
		return &ValidationError{Field: "/timestamp", Reason: "year outside 0000-9999"}
	}
	switch e.Channel {
	case ChannelSlack, ChannelGitHub, ChannelSentry, ChannelOpenProject, ChannelInternal:
	default:
		return &ValidationError{Field: "/channel", Reason: fmt.Sprintf("value must be one of slack, github, sentry, openproject, internal; got %q", e.Channel)}
	}
	switch e.Role {
	case RoleUser, RoleAssistant, RoleTool, RoleSystem:
	default:
		return &ValidationError{Field: "/role", Reason: fmt.Sprintf("value must be one of user, assistant, tool, system; got %q", e.Role)}
	}
	if e.ToolCall != nil && e.ToolCall.Name == "" {
		return &ValidationError{Field: "/tool_call/name", Reason: "minLength: got 0, want 1"}
	}
	if m := e.MemoryUpdate; m != nil {
		if m.Kind != MemoryEpisodic && m.Kind != MemoryLongTerm {
			return &ValidationError{Field: "/memory_update/kind", Reason: fmt.Sprintf("value must be one of episodic, long_term; got %q", m.Kind)}
		}
		if m.Data == nil {
			return &ValidationError{Field: "/memory_update/data", Reason: "got null, want object"}
		}
		if m.TTL < 0 {
			return &ValidationError{Field: "/memory_update/ttl", Reason: "minimum: got negative, want 0"}
		}
	}
	if v := e.Meta.MCPVersion; v != "" && !isSemver(v) {
		return &ValidationError{Field: "/meta/mcp_version", Reason: fmt.Sprintf("%q is not a semantic version", v)}
	}
	for k := range e.Meta.Extra {
		if knownMeta[k] {
			return &ValidationError{Field: "/meta/" + k, Reason: "set it through its Meta field, not Extra"}
		}
		for n := range knownMeta {
			if len(k) == len(n) && k != n && equalFold(k, n) {
				return &ValidationError{Field: "/meta/" + k, Reason: fmt.Sprintf("field names are case-sensitive: want %q", n)}
			}
		}
	}
	return nil
}

// isSemver reports whether v matches ^[0-9]+\.[0-9]+\.[0-9]+$ (three
// dot-separated runs of digits), without a regular expression on the
// publish path.
func isSemver(v string) bool {
	parts, digits := 1, 0
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case c >= '0' && c <= '9':
			digits++
		case c == '.' && digits > 0 && parts < 3:
			parts, digits = parts+1, 0
		default:
			return false
		}
	}
	return parts == 3 && digits > 0
}

func isUUIDv4(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < 36; i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
			continue
		case 14:
			if c != '4' {
				return false
			}
			continue
		case 19:
			if c != '8' && c != '9' && c != 'a' && c != 'b' && c != 'A' && c != 'B' {
				return false
			}
			continue
		}
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return true
}

func equalFold(a, b string) bool {
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}
