# Doxygen's input filter (cmake/ApsDocs.cmake): aps documents with plain // comments, which
# Doxygen skips; a comment on a line of its own becomes ///, one after a declaration ///<.
# Runs on the text Doxygen reads only; the sources are not changed.
s|^\([[:space:]]*\)//\([^/!]\)|\1///\2|
s|^\([[:space:]]*\)//$|\1///|
s|\([;,{]\)\([[:space:]]*\)//\([^/!<]\)|\1\2///<\3|
