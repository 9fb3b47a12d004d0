package secret_test

import (
	"testing"

	"github.com/relaystation/relay/secret"
)

func TestRedactURLs(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct{ in, want string }{
		"nats user and password": {"nats://relay:s3cret@nats:4222", "nats://REDACTED@nats:4222"},
		"nats token":             {"nats://tok3n@127.0.0.1:4222", "nats://REDACTED@127.0.0.1:4222"},
		"server list":            {"nats://a:b@n1:4222,nats://c:d@n2:4222", "nats://REDACTED@n1:4222,nats://REDACTED@n2:4222"},
		"redis password only":    {"redis://:pw@redis:6379/0", "redis://REDACTED@redis:6379/0"},
		"postgres in an error":   {`connect "postgres://u:p%40ss@db/test": refused`, `connect "postgres://REDACTED@db/test": refused`},
		"libpq key-value dsn":    {"host=db user=u password=hunter2 dbname=x", "host=db user=u password=REDACTED dbname=x"},
		"no credentials":         {"nats://nats:4222 and mailto:a@b", "nats://nats:4222 and mailto:a@b"},
		"email in a path":        {"https://host/u/a@b", "https://host/u/a@b"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if got := secret.RedactURLs(tc.in); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}
