// Decodes OTLP profiles requests (files named on the command line) with the
// OpenTelemetry Collector's own data model (pdata/pprofile, what its otlp receiver
// uses), re-indexes them into a fresh dictionary (MergeTo fails on a reference out of
// range), and prints per file one JSON line: resources, profiles, the samples of the
// samples/count profiles, and those samples per (pid, leaf function or
// "binary+0xoffset"). Used by crates/tailprof-agent/tests/otlp_pdata.rs.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
)

type summary struct {
	Resources int              `json:"resources"`
	Profiles  int              `json:"profiles"`
	Samples   int64            `json:"samples"`
	Leaves    map[string]int64 `json:"leaves"`
	Error     string           `json:"error,omitempty"`
}

func decode(b []byte) summary {
	req := pprofileotlp.NewExportRequest()
	if err := req.UnmarshalProto(b); err != nil {
		return summary{Error: "unmarshal: " + err.Error()}
	}
	p := req.Profiles()
	cp := pprofile.NewProfiles()
	p.CopyTo(cp)
	if err := cp.MergeTo(pprofile.NewProfiles()); err != nil {
		return summary{Error: "merge: " + err.Error()}
	}
	d := p.Dictionary()
	st := d.StringTable()
	s := summary{Resources: p.ResourceProfiles().Len(), Profiles: p.ProfileCount(), Leaves: map[string]int64{}}
	for i := 0; i < p.ResourceProfiles().Len(); i++ {
		rp := p.ResourceProfiles().At(i)
		pid, _ := rp.Resource().Attributes().Get("process.pid")
		for j := 0; j < rp.ScopeProfiles().Len(); j++ {
			sp := rp.ScopeProfiles().At(j)
			for k := 0; k < sp.Profiles().Len(); k++ {
				pr := sp.Profiles().At(k)
				if st.At(int(pr.SampleType().TypeStrindex())) != "samples" {
					continue
				}
				for n := 0; n < pr.Samples().Len(); n++ {
					smp := pr.Samples().At(n)
					v := smp.Values().At(0)
					s.Samples += v
					stack := d.StackTable().At(int(smp.StackIndex()))
					loc := d.LocationTable().At(int(stack.LocationIndices().At(0)))
					name := fmt.Sprintf("%s+0x%x", st.At(int(d.MappingTable().At(int(loc.MappingIndex())).FilenameStrindex())), loc.Address())
					if loc.Lines().Len() > 0 {
						name = st.At(int(d.FunctionTable().At(int(loc.Lines().At(0).FunctionIndex())).NameStrindex()))
					}
					s.Leaves[fmt.Sprintf("%d %s", pid.Int(), name)] += v
				}
			}
		}
	}
	return s
}

func main() {
	for _, f := range os.Args[1:] {
		b, err := os.ReadFile(f)
		if err != nil {
			panic(err)
		}
		out, _ := json.Marshal(decode(b))
		fmt.Println(string(out))
	}
}
