"""mxlogits_codegen: instances.yaml -> templates/ -> generated/ (run `mxlogits-gen`)."""
