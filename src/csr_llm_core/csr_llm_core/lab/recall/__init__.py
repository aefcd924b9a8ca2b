"""Memory recall benchmark: long robot histories, multiple-choice questions, five ways to remember.

`episode` holds the JSONL dataset format, `world` generates household-robot histories with ground
truth, `families` turns ground truth into questions, `methods` builds each method's prompt and
answers through a choice grammar, `scoring` computes accuracies, intervals and AUC, `bench` runs it.
"""
