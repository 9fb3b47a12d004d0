package bundle

import (
	"bytes"
	"errors"
	"fmt"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/relaystation/relay/envelope"
)

// Schema is the file name of the relay bundle manifest's schema inside
// schemas.FS.
const Schema = "bundle.schema.json"

var compiled = sync.OnceValues(func() (*jsonschema.Schema, error) { return envelope.CompileSchema(Schema) })

// validateManifest checks a manifest (as standard JSON) against Schema.
func validateManifest(data []byte) error {
	s, err := compiled()
	if err != nil {
		return err
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	if err := envelope.FromSchemaError(s.Validate(doc)); err != nil {
		var ve *envelope.ValidationError
		if errors.As(err, &ve) {
			return fmt.Errorf("%s: %s", ve.Field, ve.Reason)
		}
		return err
	}
	return nil
}
