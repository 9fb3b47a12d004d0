package mappers_test

import (
	"crypto/sha256"
	"fmt"
	"sync"
	"testing"

	"github.com/relaystation/relay/mappers"
)

// TestHMACPool: concurrent checks with reused hashes accept exactly the HMAC
// of their own body, whatever the others hash meanwhile.
func TestHMACPool(t *testing.T) {
	t.Parallel()
	const secret = "k"
	p := mappers.NewHMACPool(sha256.New, []byte(secret))
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				body := fmt.Appendf(nil, "body %d of %d", i, g)
				other := fmt.Appendf(nil, "body %d of %d", i+1, g)
				if !p.Equal(body, mappers.HMAC(sha256.New, secret, body)) {
					errs <- fmt.Errorf("refused the HMAC of %q", body)
					return
				}
				if p.Equal(body, mappers.HMAC(sha256.New, secret, other)) {
					errs <- fmt.Errorf("accepted the HMAC of %q for %q", other, body)
					return
				}
				if p.Equal(body, nil) {
					errs <- fmt.Errorf("accepted an empty MAC for %q", body)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
