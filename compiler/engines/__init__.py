"""Engine emitters: a plan deployment -> its engine's launch command (vLLM, SGLang, TensorRT-LLM).

``realise.realise(plan, ir)`` fills a plan's commands; ``base.flag_table()`` reads profiles/engine_flags.yaml.
"""
