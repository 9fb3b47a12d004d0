package bundle

import "errors"

func (in *Installer) loadMCPB(source string, opts Options) (*Bundle, func(bool), error) {
	return nil, nil, errors.New("MCP Bundles are not supported yet")
}
