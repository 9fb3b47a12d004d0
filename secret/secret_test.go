package secret_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/relaystation/relay/secret"
)

func TestNeverPrinted(t *testing.T) {
	t.Parallel()
	s := secret.New("xoxb-super-secret")
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	log.Info("cfg", "token", s, "nested", struct{ T secret.Value }{s})
	j, _ := json.Marshal(struct{ T secret.Value }{s})
	out := buf.String() + fmt.Sprint(s) + fmt.Sprintf("%v %+v %#v %s %q", s, s, s, s, s) + string(j)
	if strings.Contains(out, "super-secret") {
		t.Fatalf("secret leaked: %s", out)
	}
	if got := s.Reveal(); got != "xoxb-super-secret" {
		t.Errorf("got Reveal %q, want the value", got)
	}
	if secret.New("").IsSet() || !s.IsSet() {
		t.Error("IsSet is wrong")
	}
}
