package memory

import (
	"strings"
	"testing"
	"unsafe"

	"github.com/relaystation/relay/envelope"
)

// TestTurnOwnsItsBytes: a turn made from a parsed envelope shares no bytes
// with it, so a session kept in memory does not keep the whole message (a
// parsed envelope's strings are slices of one copy of its input).
func TestTurnOwnsItsBytes(t *testing.T) {
	t.Parallel()
	src := envelope.New(envelope.ChannelGitHub, envelope.RoleUser, "the build fails on main "+strings.Repeat("x", 64))
	src.Meta.Thread = "github:acme/api#7"
	raw, err := src.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	e, err := envelope.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	tu, ok := turnOf(e)
	if !ok {
		t.Fatal("no turn for an envelope with content")
	}
	if tu.ID != e.ID || tu.Role != string(e.Role) || tu.Content != e.Content || !tu.Time.Equal(e.Timestamp) {
		t.Fatalf("turn %+v does not match envelope %s/%s/%q", tu, e.ID, e.Role, e.Content)
	}
	for _, f := range []struct{ name, turn, env string }{
		{"id", tu.ID, e.ID}, {"role", tu.Role, string(e.Role)}, {"content", tu.Content, e.Content},
	} {
		if unsafe.StringData(f.turn) == unsafe.StringData(f.env) {
			t.Errorf("the turn's %s shares the parsed envelope's bytes", f.name)
		}
	}
	if _, ok := turnOf(envelope.New(envelope.ChannelGitHub, envelope.RoleUser, "  ")); ok {
		t.Error("a turn for an envelope without text")
	}
}
