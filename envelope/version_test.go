package envelope_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/relaystation/relay/envelope"
)

func TestReadable(t *testing.T) {
	for _, v := range []string{"", envelope.Version, "1.0.1", "1.7.0", "1.12.3"} {
		if err := envelope.Readable(v); err != nil {
			t.Errorf("Readable(%q) = %v, want nil: same major", v, err)
		}
	}
	for _, v := range []string{"2.0.0", "0.9.0", "10.0.0", "11.0.0"} {
		err := envelope.Readable(v)
		if !errors.Is(err, envelope.ErrOtherMajor) {
			t.Errorf("Readable(%q) = %v, want ErrOtherMajor", v, err)
			continue
		}
		if !strings.Contains(err.Error(), `"`+v+`"`) || !strings.Contains(err.Error(), "reads 1.x") {
			t.Errorf("Readable(%q) = %q, want both versions named", v, err)
		}
	}
}
