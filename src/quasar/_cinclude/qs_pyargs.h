/* Checked conversion of Python int arguments for the compiled hot paths: the same TypeError (not an int)
 * and ValueError (out of range) that protobuf's setters raise, so a compiled encoder and its pure-Python
 * twin fail alike. Needs Python.h included first. */
#ifndef QS_PYARGS_H
#define QS_PYARGS_H

#include <stdint.h>

/* An int in [low, high] -> *out; TypeError / ValueError naming `name`. */
static int qs_arg_signed(PyObject *obj, const char *name, long long low, long long high, long long *out) {
    if (!PyLong_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int, got %.100s", name, Py_TYPE(obj)->tp_name);
        return -1;
    }
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (v == -1 && PyErr_Occurred()) return -1;
    if (overflow || v < low || v > high) {
        PyErr_Format(PyExc_ValueError, "%s %R is out of range [%lld, %lld]", name, obj, low, high);
        return -1;
    }
    *out = v;
    return 0;
}

/* An int in [0, high] (high up to 2**64 - 1) -> *out; TypeError / ValueError naming `name`. */
static int qs_arg_unsigned(PyObject *obj, const char *name, unsigned long long high, uint64_t *out) {
    if (!PyLong_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int, got %.100s", name, Py_TYPE(obj)->tp_name);
        return -1;
    }
    int negative = _PyLong_Sign(obj) < 0;
    unsigned long long v = 0;
    if (!negative) {
        v = PyLong_AsUnsignedLongLong(obj);
        if (v == (unsigned long long)-1 && PyErr_Occurred()) {
            if (!PyErr_ExceptionMatches(PyExc_OverflowError)) return -1;
            PyErr_Clear();
            negative = 1; /* reported below as out of range */
        }
    }
    if (negative || v > high) {
        PyErr_Format(PyExc_ValueError, "%s %R is out of range [0, %llu]", name, obj, high);
        return -1;
    }
    *out = v;
    return 0;
}

/* A ledger or entry id: an int64 (a negative one as its uint64 wire value, -1 -> 2**64 - 1, as the protobuf
 * builders' u64()) or a uint64 -> *out; TypeError / ValueError naming `name`. */
static int qs_arg_id(PyObject *obj, const char *name, uint64_t *out) {
    if (PyLong_Check(obj) && _PyLong_Sign(obj) < 0) {
        long long v;
        if (qs_arg_signed(obj, name, INT64_MIN, -1, &v)) return -1;
        *out = (uint64_t)v;
        return 0;
    }
    return qs_arg_unsigned(obj, name, UINT64_MAX, out);
}

#endif /* QS_PYARGS_H */
