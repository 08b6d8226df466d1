"""The tool-argument exactness suite: load a suite, ask an endpoint, compare, judge, store.

``suite`` reads and checks a JSONL suite before anything is sent; ``compare`` scores one
tool call against the expected one field by field (schema-aware and strict); ``runner``
asks an OpenAI-compatible endpoint every case; ``statistics`` holds the paired tests;
``gate`` turns a baseline run and a canary run into a gate :class:`Evaluation`;
``records`` stores runs and reads them back; ``schedule`` runs a due suite for a rollout;
``source`` adds the suite's schema violations to the live counts the schema gates judge.
"""
