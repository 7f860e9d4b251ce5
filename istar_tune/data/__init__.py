"""A task's data, read into one table: the stage below training, torch-free.

``format`` says what a data format is and ``registry`` holds them by name (``delimited`` csv/tsv, ``json_rows``,
``parquet``, ``lines``, ``glue``, ``ptb``, ``squad``; ``text_files`` and ``builder`` what several share); ``hub`` reads
a hub data set; ``reading`` reads a task's splits by its format (``split``: one file as both) and resolves its
definition; ``checking`` is the one checker every table takes (``answers``: extractive QA's; ``headers``: a header
read as data; ``rows``: how a refusal names rows). Nothing here is imported until asked for: the definitions look
formats up while this package reads ``Task``.
"""
