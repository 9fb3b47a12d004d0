package bundle

import (
	"errors"
	"fmt"

	"github.com/relaystation/relay/envelope"
)

// Schema is the file name of the relay bundle manifest's schema inside
// schemas.FS.
const Schema = "bundle.schema.json"

// validateManifest checks a manifest (as standard JSON) against Schema.
func validateManifest(data []byte) error {
	err := envelope.ValidateAgainst(Schema, data)
	var ve *envelope.ValidationError
	if errors.As(err, &ve) {
		return fmt.Errorf("%s: %s", ve.Field, ve.Reason)
	}
	return err
}
