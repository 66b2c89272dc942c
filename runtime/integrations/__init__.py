"""The op inside model code: a DeepSeek-V3.2-style lightning indexer built on it (indexer), and
DeepGEMM's FP4 paged MQA-logits call shape, which vLLM and SGLang call, mapped onto it (deepgemm)."""
