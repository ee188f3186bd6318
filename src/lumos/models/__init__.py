"""Real models with real weights: Llama (SmolLM2), BERT (MiniLM), MobileNetV2, Whisper."""
